"""OpenAI Responses API bodies in: ``POST /v1/responses``, without server-side storage.

A body is checked for what the Responses API has and chat completions lack
(``input`` as a string or as items, ``instructions``, ``max_output_tokens``,
flat function tools, ``text.format``, :mod:`tercet.http.responses.responses_options`) and
translated into a chat completions body, which :mod:`tercet.http.chat.chat_bridge`
reads as ``/v1/chat/completions`` does. Every field the translation reads or the
answer repeats is checked by type here first, so that a refusal names the
Responses API's field, as does any refusal of the chat completions parser
(through the request's :class:`ClientFields`). tercet keeps no responses:
``store: true``, ``previous_response_id``, ``conversation`` and ``background: true``
are a 400, as are built-in tools (web search, files, ...) and inputs other than
text; ``store`` left out is taken as false (the answer says ``"store": false``).
Unknown fields are ignored.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.chat.client_fields import ClientFields, FieldRule
from tercet.http.chat.protocol_fields import (
    Translation,
    checked_flag,
    checked_string,
    finished_chat_body,
    given_fields,
    joined_text,
    optional_string,
)
from tercet.http.responses import responses_options as options

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")
# The chat completions fields the translation fills -> the Responses API field they came from.
FIELD_RULES = (
    FieldRule.of(r"max_tokens", "max_output_tokens"),
    FieldRule.of(r"response_format\.json_schema", "text.format"),
    FieldRule.of(r"response_format", "text.format"),
    FieldRule.of(r"tools\[(\d+)\]\.function", r"tools[\1]"),
    FieldRule.of(r"tool_choice\.function", "tool_choice"),
)
SAMPLING_FIELDS = ("temperature", "top_p", "parallel_tool_calls", "user")
# The fields a response repeats as they were sent (the sampling fields are checked by chat completions).
REPEATED_FIELDS = ("max_output_tokens", "temperature", "top_p", "user")
STATEFUL_FIELDS = {
    "previous_response_id": "previous_response_id: this server keeps no responses (store is not supported); "
                            "send the whole conversation as input",
    "conversation": "conversation: this server keeps no conversations; send the whole conversation as input",
}


def translate(body: dict) -> Translation:
    """The chat completions body for a Responses API body, checked, and what its response repeats."""
    _refuse_stored_state(body)
    instructions = optional_string(body.get("instructions"), "instructions")
    conversation = _instructions(instructions) + _input(body.get("input"))
    tools = options.function_tools(body.get("tools"))
    choice = options.tool_choice(body.get("tool_choice"), [tool["name"] for tool in tools])
    text, response_format = options.text_options(body.get("text"))
    _check_one_constraint(choice, response_format)
    chat = {"messages": [message for message, _ in conversation], **given_fields(body, ["model", *SAMPLING_FIELDS])}
    chat = finished_chat_body(
        chat, body, max_tokens=body.get("max_output_tokens"), tools=[options.chat_tool(tool) for tool in tools] or None,
        tool_choice=_chat_tool_choice(choice), response_format=response_format,
    )
    echoed = {
        **{field: body.get(field) for field in REPEATED_FIELDS}, "instructions": instructions,
        "metadata": options.metadata(body.get("metadata")), "reasoning": options.reasoning(body.get("reasoning")),
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False, "tool_choice": choice or "auto",
        "tools": tools, "text": text,
    }
    fields = ClientFields(FIELD_RULES, tuple(where for _, where in conversation), messages_field="input")
    return Translation(chat, fields, echoed)


def chat_body(body: dict) -> dict:
    return translate(body).chat


def _refuse_stored_state(body: dict) -> None:
    if checked_flag(body.get("store"), "store"):
        raise RequestError("store: this server keeps no responses; send store: false", "store")
    for field, reason in STATEFUL_FIELDS.items():
        if body.get(field) is not None:  # any value, of any type: there is nothing stored to name
            raise RequestError(reason, field)
    if checked_flag(body.get("background"), "background"):
        raise RequestError("background: responses run only in the foreground here", "background")


def _check_one_constraint(choice, response_format) -> None:
    """A forced call is kept to its tool's schema: a text format cannot also keep the output to its own."""
    if choice not in (None, "auto", "none") and response_format is not None:
        raise RequestError(f"tool_choice {shown(choice)} forces a tool call, which cannot be combined with a "
                           "text.format other than text; send one or the other", "tool_choice")


def _chat_tool_choice(choice) -> str | dict | None:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _instructions(instructions: str | None) -> list[tuple[dict, str]]:
    return [] if instructions is None else [({"role": "system", "content": instructions}, "instructions")]


def _input(items) -> list[tuple[dict, str]]:
    """Each chat message and the input item it came from (a turn's calls are one message: its first call's)."""
    if isinstance(items, str):
        check_text(items, "input")
        return [({"role": "user", "content": items}, "input")]
    if not isinstance(items, list) or not items:
        raise RequestError("input must be a string or a non-empty list of input items", "input")
    messages: list[tuple[dict, str]] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be an input item object, got {shown(item)}", where)
        _add_item(messages, item, where)
    return messages


def _add_item(messages: list[tuple[dict, str]], item: dict, where: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        messages.append((_message(item, where), where))
    elif kind == "function_call":
        call = {"id": checked_string(item.get("call_id"), f"{where}.call_id"), "type": "function",
                "function": {"name": checked_string(item.get("name"), f"{where}.name"),
                             "arguments": checked_string(item.get("arguments", "{}"), f"{where}.arguments", True)}}
        # Calls made in one turn are one assistant message.
        last = messages[-1][0] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        else:
            messages.append(({"role": "assistant", "content": "", "tool_calls": [call]}, where))
    elif kind == "function_call_output":
        message = {"role": "tool", "tool_call_id": checked_string(item.get("call_id"), f"{where}.call_id"),
                   "content": _content_text(item.get("output"), f"{where}.output")}
        messages.append((message, where))
    elif kind != "reasoning":  # past reasoning is not shown to the model again
        raise RequestError(f"{where}: input items of type {shown(kind)} are not supported here (this server reads "
                           "messages, function_call and function_call_output items)", f"{where}.type")


def _message(item: dict, where: str) -> dict:
    role = item.get("role")
    # Checked to be a string before it is looked up: a dict or a list cannot be a key.
    if not isinstance(role, str) or role not in ROLES:
        raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}; got {shown(role)}", f"{where}.role")
    return {"role": ROLES[role], "content": _content_text(item.get("content"), f"{where}.content")}


def _content_text(content, where: str) -> str:
    return joined_text(content, where, TEXT_PARTS)
