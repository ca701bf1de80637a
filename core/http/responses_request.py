"""OpenAI Responses API bodies in: ``POST /v1/responses``, without server-side storage.

A body is checked for what the Responses API has and chat completions lack
(``input`` as a string or as items, ``instructions``, ``max_output_tokens``,
flat function tools, ``text.format``) and translated into a chat completions
body, which :mod:`tercet.http.chat_bridge` reads as ``/v1/chat/completions``
does. tercet keeps no responses: ``store: true``, ``previous_response_id``,
``conversation`` and ``background`` are a 400, as are built-in tools (web
search, files, ...) and inputs other than text; ``store`` left out is taken as
false (the answer says ``"store": false``). Unknown fields are ignored.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.protocol_fields import checked_string, finished_chat_body, given_fields, joined_text, translated

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")
# Chat completions fields the translation fills -> the Responses API field they came from.
RENAMES = {"max_tokens": "max_output_tokens", "response_format": "text.format", "messages": "input",
           "tools": "tools", "tool_choice": "tool_choice"}
SAMPLING_FIELDS = ("temperature", "top_p", "parallel_tool_calls", "user")
STATEFUL_FIELDS = {
    "previous_response_id": "previous_response_id: this server keeps no responses (store is not supported); "
                            "send the whole conversation as input",
    "conversation": "conversation: this server keeps no conversations; send the whole conversation as input",
    "background": "background: responses run only in the foreground here",
}


def chat_body(body: dict) -> dict:
    """The chat completions body for a Responses API body."""
    _refuse_stored_state(body)
    chat = {"messages": _instructions(body.get("instructions")) + _input(body.get("input")),
            **given_fields(body, ["model", *SAMPLING_FIELDS])}
    return finished_chat_body(
        chat, body, max_tokens=body.get("max_output_tokens"), tools=_tools(body.get("tools")) or None,
        tool_choice=translated(body, "tool_choice", _tool_choice), response_format=_text_format(body.get("text")),
    )


def _refuse_stored_state(body: dict) -> None:
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise RequestError(f"store must be true or false, got {shown(store)}", "store")
    if store:
        raise RequestError("store: this server keeps no responses; send store: false", "store")
    for field, reason in STATEFUL_FIELDS.items():
        if body.get(field) not in (None, False):
            raise RequestError(reason, field)


def _instructions(instructions) -> list[dict]:
    if instructions is None:
        return []
    if not isinstance(instructions, str):
        raise RequestError("instructions must be a string", "instructions")
    check_text(instructions, "instructions")
    return [{"role": "system", "content": instructions}]


def _input(items) -> list[dict]:
    if isinstance(items, str):
        check_text(items, "input")
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RequestError("input must be a string or a non-empty list of input items", "input")
    messages: list[dict] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be an input item object", where)
        _add_item(messages, item, where)
    return messages


def _add_item(messages: list[dict], item: dict, where: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = ROLES.get(item.get("role"))
        if role is None:
            raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}; got {shown(item.get('role'))}",
                               f"{where}.role")
        messages.append({"role": role, "content": _content_text(item.get("content"), f"{where}.content")})
    elif kind == "function_call":
        call = {"id": checked_string(item.get("call_id"), f"{where}.call_id"), "type": "function",
                "function": {"name": checked_string(item.get("name"), f"{where}.name"),
                             "arguments": checked_string(item.get("arguments", "{}"), f"{where}.arguments", True)}}
        # Calls made in one turn are one assistant message.
        if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
            messages[-1]["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
        messages.append({"role": "tool", "tool_call_id": checked_string(item.get("call_id"), f"{where}.call_id"),
                         "content": text})
    elif kind != "reasoning":  # past reasoning is not shown to the model again
        raise RequestError(f"{where}: input items of type {shown(kind)} are not supported here (this server reads "
                           "messages, function_call and function_call_output items)", f"{where}.type")


def _content_text(content, where: str) -> str:
    return joined_text(content, where, TEXT_PARTS)


def _tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools must be a list of function tools", "tools")
    chat_tools = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise RequestError(f"tools[{index}]: tools of type {shown(kind)} are not supported here; "
                               "define function tools", f"tools[{index}].type")
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def _tool_choice(choice) -> str | dict:
    if isinstance(choice, str):
        return choice  # "auto", "none", "required": chat completions' own, checked there
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise RequestError('tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}; '
                       f"got {shown(choice)}", "tool_choice")


def _text_format(text) -> dict | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise RequestError('text must be an object such as {"format": {"type": "text"}}', "text")
    text_format = text.get("format")
    if text_format is None:
        return None
    if not isinstance(text_format, dict):
        raise RequestError("text.format must be an object with a type", "text.format")
    if text_format.get("type") != "json_schema":
        return text_format  # {"type": "text"} and {"type": "json_object"}: chat completions' own, checked there
    # Responses flatten what chat completions nest under "json_schema".
    inner = {key: value for key, value in text_format.items() if key != "type"}
    return {"type": "json_schema", "json_schema": inner}
