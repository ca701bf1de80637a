"""Anthropic Messages API bodies in: ``/v1/messages`` and ``/v1/messages/count_tokens``.

A body is checked for what the Messages API has and chat completions lack
(``system`` and content blocks, ``tool_use`` and ``tool_result`` blocks,
``stop_sequences``, ``metadata``, Anthropic's ``tools`` and ``tool_choice``)
and translated into a chat completions body, which :mod:`tercet.http.chat_bridge`
then reads as ``/v1/chat/completions`` does: the sampling fields, the prompt's
length and the tools are checked there once. A refusal names the Messages API's
field. Fields tercet cannot honour (images, documents, extended ``thinking``
without a reasoning parser, server tools) are a 400; unknown fields are ignored.
"""

from __future__ import annotations

import json

from tercet.errors import RequestError
from tercet.field_checks import shown
from tercet.http.protocol_fields import checked_string, finished_chat_body, given_fields, joined_text, translated

ROLES = ("user", "assistant")
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
# Chat completions fields the translation fills -> the Messages API field they came from.
RENAMES = {"stop": "stop_sequences", "tool_choice": "tool_choice", "user": "metadata.user_id"}
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k")


def chat_body(body: dict, *, count_only: bool = False) -> dict:
    """The chat completions body for a Messages API body (``count_only``: no answer is wanted)."""
    chat = {"messages": _system(body.get("system")) + _messages(body.get("messages")), **given_fields(body, ["model"])}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        chat["tool_choice"] = _tool_choice(body.get("tool_choice"))
    elif body.get("tool_choice") is not None:
        _tool_choice(body.get("tool_choice"))  # checked, though without tools it has nothing to choose
    _check_thinking(body.get("thinking"))
    if count_only:
        return chat
    _require_max_tokens(body)
    chat.update(given_fields(body, SAMPLING_FIELDS))
    return finished_chat_body(chat, body, stop=translated(body, "stop_sequences", _stop_sequences),
                              user=_metadata_user(body.get("metadata")))


def _require_max_tokens(body: dict) -> None:
    if body.get("max_tokens") is None:
        raise RequestError("max_tokens is required: the most tokens the answer may have", "max_tokens")


def _system(system) -> list[dict]:
    if system is None:
        return []
    return [{"role": "system", "content": _text_of(system, "system")}]


def _objects(items, field: str, shape: str):
    """``(where, item)`` for each item of a list of objects; the list and each item checked."""
    if not isinstance(items, list) or not items:
        raise RequestError(f"{field} must be a non-empty list of {shape} objects", field)
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be a {shape} object", where)
        yield where, item


def _messages(messages) -> list[dict]:
    chat = []
    for where, message in _objects(messages, "messages", "{role, content}"):
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role must be 'user' or 'assistant'; got {shown(role)}", f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            chat.append({"role": role, "content": content})
        elif role == "user":
            chat += _user_turn(_blocks(content, f"{where}.content"), f"{where}.content")
        else:
            chat.append(_assistant_turn(_blocks(content, f"{where}.content"), f"{where}.content"))
    return chat


def _blocks(content, where: str) -> list[dict]:
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of content blocks", where)
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise RequestError(f"{where}[{index}] must be a content block with a type", f"{where}[{index}]")
    return content


def _user_turn(blocks: list[dict], where: str) -> list[dict]:
    """A user turn's blocks: its tool results first (each a tool message), then its text."""
    results, texts = [], []
    for index, block in enumerate(blocks):
        at = f"{where}[{index}]"
        if block["type"] == "tool_result":
            results.append({"role": "tool", "tool_call_id": checked_string(block.get("tool_use_id"), f"{at}.tool_use_id"),
                            "content": _tool_result_text(block, at)})
        elif block["type"] == "text":
            texts.append(checked_string(block.get("text"), f"{at}.text", allow_empty=True))
        else:
            _refuse_block(block, at)
    return results + ([{"role": "user", "content": "\n".join(texts)}] if texts or not results else [])


def _assistant_turn(blocks: list[dict], where: str) -> dict:
    texts, calls = [], []
    for index, block in enumerate(blocks):
        at = f"{where}[{index}]"
        if block["type"] == "text":
            texts.append(checked_string(block.get("text"), f"{at}.text", allow_empty=True))
        elif block["type"] == "tool_use":
            calls.append(_tool_call(block, at))
        elif block["type"] not in ("thinking", "redacted_thinking"):  # past reasoning is not shown to the model again
            _refuse_block(block, at)
    turn = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        turn["tool_calls"] = calls
    return turn


def _tool_call(block: dict, where: str) -> dict:
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise RequestError(f"{where}.input must be an object", f"{where}.input")
    return {"id": checked_string(block.get("id"), f"{where}.id"), "type": "function",
            "function": {"name": checked_string(block.get("name"), f"{where}.name"), "arguments": json.dumps(arguments)}}


def _tool_result_text(block: dict, where: str) -> str:
    content = block.get("content", "")
    text = content if isinstance(content, str) else _text_of(content, f"{where}.content")
    return f"Error: {text}" if block.get("is_error") is True else text


def _text_of(content, where: str) -> str:
    return joined_text(content, where, ("text",))


def _refuse_block(block: dict, where: str) -> None:
    raise RequestError(f"{where}: content blocks of type {shown(block['type'])} are not supported here "
                       "(this server reads text, tool_use and tool_result blocks)", f"{where}.type")


def _tools(tools) -> list[dict]:
    if tools is None or tools == []:
        return []
    chat_tools = []
    for where, tool in _objects(tools, "tools", "{name, description, input_schema}"):
        if tool.get("type") not in (None, "custom"):
            raise RequestError(f"{where}: server tools ({shown(tool.get('type'))}) are not supported; "
                               "define client tools with name and input_schema", f"{where}.type")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise RequestError(f"{where}.input_schema must be a JSON Schema object", f"{where}.input_schema")
        function = {"name": tool.get("name"), "parameters": schema}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def _tool_choice(choice) -> str | dict:
    if choice is None:
        return "auto"
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in TOOL_CHOICES:
        return TOOL_CHOICES[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": checked_string(choice.get("name"), "tool_choice.name")}}
    raise RequestError('tool_choice must be {"type": "auto"}, {"type": "any"}, {"type": "none"} or '
                       f'{{"type": "tool", "name": ...}}; got {shown(choice)}', "tool_choice")


def _stop_sequences(stop_sequences) -> list[str]:
    if not isinstance(stop_sequences, list) or not all(isinstance(stop, str) for stop in stop_sequences):
        raise RequestError("stop_sequences must be a list of strings", "stop_sequences")
    return stop_sequences


def _metadata_user(metadata) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise RequestError("metadata must be an object such as {\"user_id\": \"...\"}", "metadata")
    user = metadata.get("user_id")
    if user is not None and not isinstance(user, str):
        raise RequestError("metadata.user_id must be a string", "metadata.user_id")
    return user


def _check_thinking(thinking) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        raise RequestError('thinking must be {"type": "enabled", "budget_tokens": n} or {"type": "disabled"}',
                           "thinking")


def thinking_enabled(body: dict) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def require_thinking_support(body: dict, reasoning) -> None:
    """``thinking: enabled`` needs the server's reasoning parser (``reasoning``, None without one): the
    answer's reasoning then comes as ``thinking`` blocks. ``budget_tokens`` is not enforced."""
    if thinking_enabled(body) and reasoning is None:
        raise RequestError("thinking: extended thinking needs a reasoning parser ([reasoning] parser), which "
                           "this server does not run; leave thinking out", "thinking")
