"""A chat request's ``tools``, ``tool_choice`` and ``parallel_tool_calls``.

- ``tool_choice`` ``"none"``: the tools are shown to the model, but its answer
  is text and is not searched for calls.
- ``"auto"`` (the default when tools are sent): the tool-call parser finds any
  calls in the answer.
- ``"required"``, or ``{"type": "function", "function": {"name": ...}}``: the
  answer is one call, kept by the grammar backend to the JSON Schema
  ``{"name": <a tool's name>, "arguments": <its parameters>}``, so the
  arguments always parse and match. Such a request cannot also send
  ``response_format``, ``regex`` or ``ebnf``.

The legacy ``functions`` and ``function_call`` fields are refused with a
pointer to these.
"""

from __future__ import annotations

import re

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.structured_output import schema_text
from tercet.tools.request import ToolRequest

TOOL_CHOICE_MODES = ("none", "auto", "required")
# OpenAI's rule for function names.
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
FUNCTION_NAME_PATTERN = f"^{FUNCTION_NAME.pattern}$"
# Fields naming another constraint on the output; a forced call is one already.
OTHER_CONSTRAINTS = ("response_format", "regex", "ebnf")


def parse_tool_request(body: dict) -> ToolRequest | None:
    """The request's tool fields; None when it offers no tools."""
    _refuse_legacy_functions(body)
    tools = _parse_tools(body.get("tools"))
    choice, function = _parse_tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError(f"parallel_tool_calls must be true or false, got {shown(parallel)}", "parallel_tool_calls")
    if not tools:
        return None
    request = ToolRequest(tuple(tools), choice, function, parallel is not False)
    if request.is_forced:
        for field in OTHER_CONSTRAINTS:
            if body.get(field) is not None and body.get(field) != {"type": "text"}:
                raise RequestError(
                    f"tool_choice {shown(body.get('tool_choice'))} forces a tool call, which cannot be combined "
                    f"with {field}; send one or the other",
                    "tool_choice",
                )
    return request


def _refuse_legacy_functions(body: dict) -> None:
    for field in ("functions", "function_call"):
        if body.get(field) is not None:
            raise RequestError(
                f"{field} (the legacy function-calling API) is not supported; send tools and tool_choice instead",
                field,
            )


def _parse_tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError('tools must be a list of {"type": "function", "function": {...}} objects', "tools")
    parsed, names = [], set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise RequestError(f'{where} must be an object {{"type": "function", "function": {{...}}}}', where)
        if tool.get("type") != "function":
            raise RequestError(
                f"{where}.type must be 'function' (the only tool type served), got {shown(tool.get('type'))}",
                f"{where}.type",
            )
        function = _parse_function(tool.get("function"), f"{where}.function")
        if function["name"] in names:
            raise RequestError(f"{where}.function.name {function['name']!r} is offered twice", f"{where}.function.name")
        names.add(function["name"])
        parsed.append({"type": "function", "function": function})
    return parsed


def _parse_function(function, where: str) -> dict:
    if not isinstance(function, dict):
        raise RequestError(f"{where} must be an object with a name and optionally description and parameters", where)
    name = function.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise RequestError(
            f"{where}.name must be 1 to 64 letters, digits, underscores and dashes, got {shown(name)}", f"{where}.name"
        )
    parsed = {"name": name}
    description = function.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise RequestError(f"{where}.description must be a string, got {shown(description)}", f"{where}.description")
        check_text(description, f"{where}.description")
        parsed["description"] = description
    parameters = function.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise RequestError(
                f"{where}.parameters must be a JSON Schema object, got {shown(parameters)}", f"{where}.parameters"
            )
        schema_text(parameters, f"{where}.parameters")  # encodable and not nested past reading
        parsed["parameters"] = parameters
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise RequestError(f"{where}.strict must be true or false, got {shown(strict)}", f"{where}.strict")
    return parsed


def _parse_tool_choice(tool_choice, tools: list[dict]) -> tuple[str, str | None]:
    """``(choice, the forced function's name or None)``."""
    if tool_choice is None:
        return ("auto" if tools else "none"), None
    if isinstance(tool_choice, str):
        return _tool_choice_mode(tool_choice, tools), None
    return "function", _forced_function(tool_choice, tools)


def _tool_choice_mode(tool_choice: str, tools: list[dict]) -> str:
    if tool_choice not in TOOL_CHOICE_MODES:
        raise RequestError(
            f"tool_choice must be one of {', '.join(map(repr, TOOL_CHOICE_MODES))} or "
            f'{{"type": "function", "function": {{"name": ...}}}}, got {shown(tool_choice)}',
            "tool_choice",
        )
    if tool_choice == "required" and not tools:
        raise RequestError("tool_choice 'required' needs tools to call; the request sends none", "tool_choice")
    return tool_choice


def _forced_function(tool_choice, tools: list[dict]) -> str:
    """The name of the function ``{"type": "function", "function": {"name": ...}}`` forces, one of the tools."""
    if not isinstance(tool_choice, dict) or tool_choice.get("type") != "function":
        raise RequestError(
            f'tool_choice must be a string or {{"type": "function", "function": {{"name": ...}}}}, '
            f"got {shown(tool_choice)}",
            "tool_choice",
        )
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise RequestError("tool_choice.function.name must be the name of one of the tools", "tool_choice.function.name")
    offered = [tool["function"]["name"] for tool in tools]
    if name not in offered:
        available = ", ".join(map(repr, offered)) if offered else "none are sent"
        raise RequestError(
            f"tool_choice names the function {name!r}, which is not among the tools ({available})",
            "tool_choice.function.name",
        )
    return name
