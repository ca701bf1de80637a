"""The Anthropic Messages API's ``tools`` and ``tool_choice``, checked in Anthropic's terms and translated.

Every value is checked in the Messages API's own shape before the translation
looks at it, so that a refusal speaks of ``tools[0].input_schema`` and
``{"type": "tool", "name": ...}``, never of the chat completions fields they
become, and no value of the client's reaches a lookup unchecked (a
``tool_choice.type`` of ``{}`` once did, as a 500).
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.field_checks import shown
from tercet.http.chat.client_fields import FieldRule
from tercet.http.chat.protocol_fields import (
    checked_choice,
    checked_flag,
    checked_object,
    checked_schema,
    checked_string,
    checked_tool_name,
    listed_objects,
)

TOOL_CHOICE_TYPES = ("auto", "any", "none", "tool")
# The chat completions tool_choice each type of Anthropic's stands for ("tool": a named function).
CHAT_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
TOOL_CHOICE_SHAPE = '{"type": "auto"}, {"type": "any"}, {"type": "none"} or {"type": "tool", "name": ...}'
# The chat completions fields of a tool -> Anthropic's.
TOOL_FIELDS = (
    FieldRule.of(r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
    FieldRule.of(r"tools\[(\d+)\]\.function\.(name|description)", r"tools[\1].\2"),
    FieldRule.of(r"tools\[(\d+)\]\.function", r"tools[\1]"),
    FieldRule.of(r"tool_choice\.function\.name", "tool_choice.name"),
    FieldRule.of(r"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
)


def chat_tool_fields(body: dict) -> dict:
    """The chat completions ``tools``, ``tool_choice`` and ``parallel_tool_calls`` of the body's tools."""
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice is None:
        return {"tools": tools, "tool_choice": "auto"} if tools else {}
    chat = _tool_choice(choice, [tool["function"]["name"] for tool in tools])
    return {"tools": tools, **chat} if tools else {}


def _tools(tools) -> list[dict]:
    if tools is None or tools == []:
        return []
    chat_tools, names = [], set()
    for where, tool in listed_objects(tools, "tools", "{name, description, input_schema}"):
        if tool.get("type") is not None and tool.get("type") != "custom":
            raise RequestError(f"{where}: server tools ({shown(tool.get('type'))}) are not supported; "
                               "define client tools with name and input_schema", f"{where}.type")
        function = {"name": checked_tool_name(tool.get("name"), f"{where}.name", names),
                    "parameters": checked_schema(tool.get("input_schema"), f"{where}.input_schema")}
        if tool.get("description") is not None:
            function["description"] = checked_string(tool["description"], f"{where}.description", allow_empty=True)
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def _tool_choice(choice, names: list[str]) -> dict:
    """``{"tool_choice", "parallel_tool_calls"?}`` of Anthropic's ``tool_choice``, checked against the tools."""
    checked_object(choice, "tool_choice", TOOL_CHOICE_SHAPE)
    kind = checked_choice(choice.get("type"), "tool_choice.type", TOOL_CHOICE_TYPES)
    chat = {"tool_choice": CHAT_TOOL_CHOICES.get(kind)}
    if kind == "tool":
        name = checked_string(choice.get("name"), "tool_choice.name")
        if name not in names:
            offered = ", ".join(map(repr, names)) if names else "the request sends none"
            raise RequestError(f"tool_choice.name {name!r} is not one of the tools ({offered})", "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif kind == "any" and not names:
        raise RequestError('tool_choice {"type": "any"} needs tools to call; the request sends none', "tool_choice")
    if checked_flag(choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False
    return chat
