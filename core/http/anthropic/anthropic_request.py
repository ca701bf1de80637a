"""Anthropic Messages API bodies in: ``/v1/messages`` and ``/v1/messages/count_tokens``.

A body is checked for what the Messages API has and chat completions lack
(``system`` and content blocks, ``tool_use`` and ``tool_result`` blocks,
``stop_sequences``, ``metadata``, Anthropic's ``tools`` and ``tool_choice``,
:mod:`tercet.http.anthropic.anthropic_tools`) and translated into a chat completions
body, which :mod:`tercet.http.chat.chat_bridge` then reads as ``/v1/chat/completions``
does: the sampling fields and the prompt's length are checked there once. Every
field the translation reads is checked by type here first, so that a refusal
names the Messages API's field, as does any refusal of the chat completions
parser (through the request's :class:`ClientFields`). Fields tercet cannot honour
(images, documents, extended ``thinking`` without a reasoning parser, server
tools) are a 400; unknown fields are ignored.
"""

from __future__ import annotations

import json

from tercet.errors import RequestError
from tercet.field_checks import IntRange, shown
from tercet.http.anthropic.anthropic_tools import TOOL_FIELDS, chat_tool_fields
from tercet.http.chat.client_fields import ClientFields, FieldRule
from tercet.http.chat.protocol_fields import (
    Translation,
    checked_choice,
    checked_flag,
    checked_object,
    checked_string,
    finished_chat_body,
    given_fields,
    joined_text,
    listed_objects,
    optional_string,
    translated,
)
from tercet.sampling_params import INT32_MAX, MAX_STOP_STRINGS

ROLES = ("user", "assistant")
# The chat completions fields the translation fills -> the Messages API field they came from.
FIELD_RULES = (*TOOL_FIELDS, FieldRule.of("stop", "stop_sequences"), FieldRule.of("user", "metadata.user_id"))
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k")
# Anthropic's bounds on a thinking budget (not enforced: tercet reasons as long as the model does).
THINKING_BUDGET = IntRange(1024, INT32_MAX)


def translate(body: dict, *, count_only: bool = False) -> Translation:
    """The chat completions body for a Messages API body (``count_only``: no answer is wanted), checked."""
    conversation = _system(body.get("system")) + _messages(body.get("messages"))
    chat = {"messages": [message for message, _ in conversation], **given_fields(body, ["model"]),
            **chat_tool_fields(body)}
    _check_thinking(body.get("thinking"))
    fields = ClientFields(FIELD_RULES, tuple(where for _, where in conversation))
    if count_only:
        return Translation(chat, fields)
    _require_max_tokens(body)
    chat.update(given_fields(body, SAMPLING_FIELDS))
    chat = finished_chat_body(chat, body, stop=translated(body, "stop_sequences", _stop_sequences),
                              user=_metadata_user(body.get("metadata")))
    return Translation(chat, fields)


def chat_body(body: dict, *, count_only: bool = False) -> dict:
    return translate(body, count_only=count_only).chat


def _require_max_tokens(body: dict) -> None:
    if body.get("max_tokens") is None:
        raise RequestError("max_tokens is required: the most tokens the answer may have", "max_tokens")


def _system(system) -> list[tuple[dict, str]]:
    if system is None:
        return []
    return [({"role": "system", "content": _text_of(system, "system")}, "system")]


def _messages(messages) -> list[tuple[dict, str]]:
    """Each chat message and the client's field it came from."""
    chat = []
    for where, message in listed_objects(messages, "messages", "{role, content}"):
        role = message.get("role")
        if role not in ROLES:  # a tuple compares by ==: any value may be tested, none is hashed
            raise RequestError(f"{where}.role must be 'user' or 'assistant'; got {shown(role)}", f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            chat.append(({"role": role, "content": _text_of(content, f"{where}.content")}, f"{where}.content"))
        elif role == "user":
            chat += _user_turn(_blocks(content, f"{where}.content"), f"{where}.content")
        else:
            chat.append((_assistant_turn(_blocks(content, f"{where}.content"), f"{where}.content"), f"{where}.content"))
    return chat


def _blocks(content, where: str) -> list[dict]:
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of content blocks", where)
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise RequestError(f"{where}[{index}] must be a content block with a type", f"{where}[{index}]")
    return content


def _user_turn(blocks: list[dict], where: str) -> list[tuple[dict, str]]:
    """A user turn's blocks: its tool results first (each a tool message), then its text."""
    results, texts = [], []
    for index, block in enumerate(blocks):
        at = f"{where}[{index}]"
        if block["type"] == "tool_result":
            call_id = checked_string(block.get("tool_use_id"), f"{at}.tool_use_id")
            results.append(({"role": "tool", "tool_call_id": call_id, "content": _tool_result_text(block, at)}, at))
        elif block["type"] == "text":
            texts.append(checked_string(block.get("text"), f"{at}.text", allow_empty=True))
        else:
            _refuse_block(block, at)
    text = [({"role": "user", "content": "\n".join(texts)}, where)] if texts or not results else []
    return results + text


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
    arguments = checked_object(block.get("input", {}), f"{where}.input")
    name = checked_string(block.get("name"), f"{where}.name")
    return {"id": checked_string(block.get("id"), f"{where}.id"), "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _tool_result_text(block: dict, where: str) -> str:
    content = block.get("content", "")
    text = _text_of(content, f"{where}.content") if content is not None else ""
    return f"Error: {text}" if checked_flag(block.get("is_error"), f"{where}.is_error") else text


def _text_of(content, where: str) -> str:
    return joined_text(content, where, ("text",))


def _refuse_block(block: dict, where: str) -> None:
    raise RequestError(f"{where}: content blocks of type {shown(block['type'])} are not supported here "
                       "(this server reads text, tool_use and tool_result blocks)", f"{where}.type")


def _stop_sequences(stop_sequences) -> list[str]:
    if (not isinstance(stop_sequences, list) or len(stop_sequences) > MAX_STOP_STRINGS
            or not all(isinstance(stop, str) and stop for stop in stop_sequences)):
        raise RequestError(f"stop_sequences must be a list of at most {MAX_STOP_STRINGS} non-empty strings",
                           "stop_sequences")
    for index, stop in enumerate(stop_sequences):
        checked_string(stop, f"stop_sequences[{index}]")
    return stop_sequences


def _metadata_user(metadata) -> str | None:
    if metadata is None:
        return None
    checked_object(metadata, "metadata", 'an object such as {"user_id": "..."}')
    return optional_string(metadata.get("user_id"), "metadata.user_id")


def _check_thinking(thinking) -> None:
    if thinking is None:
        return
    shape = '{"type": "enabled", "budget_tokens": n} or {"type": "disabled"}'
    checked_object(thinking, "thinking", shape)
    if checked_choice(thinking.get("type"), "thinking.type", ("enabled", "disabled")) == "enabled":
        THINKING_BUDGET.check(thinking.get("budget_tokens"), "thinking.budget_tokens")


def thinking_enabled(body: dict) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def require_thinking_support(body: dict, reasoning) -> None:
    """``thinking: enabled`` needs the server's reasoning parser (``reasoning``, None without one): the
    answer's reasoning then comes as ``thinking`` blocks. ``budget_tokens`` is not enforced."""
    if thinking_enabled(body) and reasoning is None:
        raise RequestError("thinking: extended thinking needs a reasoning parser ([reasoning] parser), which "
                           "this server does not run; leave thinking out", "thinking")
