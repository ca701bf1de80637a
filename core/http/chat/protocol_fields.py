"""Field checks shared by the protocols translated into chat completions (Anthropic's, the Responses API)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.chat.client_fields import ClientFields
from tercet.http.openai.tool_request import FUNCTION_NAME
from tercet.http.sampling_fields import parse_flag
from tercet.http.structured_output import schema_text


@dataclass(frozen=True)
class Translation:
    """A protocol's body, checked: the chat completions body it stands for, and the table that names
    the client's own fields in a refusal of it (``echoed``: what the protocol's answer repeats)."""

    chat: dict
    fields: ClientFields
    echoed: dict = field(default_factory=dict)


def checked_string(value, where: str, allow_empty: bool = False) -> str:
    """A string field (non-empty unless ``allow_empty``), as the protocol's body named it."""
    if not isinstance(value, str) or not (value or allow_empty):
        kind = "a string" if allow_empty else "a non-empty string"
        raise RequestError(f"{where} must be {kind}, got {shown(value)}", where)
    check_text(value, where)
    return value


def optional_string(value, where: str) -> str | None:
    """A string field that may be left out or null."""
    return None if value is None else checked_string(value, where, allow_empty=True)


def checked_flag(value, where: str) -> bool | None:
    """A true/false field that may be left out or null."""
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{where} must be true or false, got {shown(value)}", where)
    return value


def checked_choice(value, where: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``; anything else, of any type, is refused before it is compared or looked up."""
    if not isinstance(value, str) or value not in choices:
        raise RequestError(f"{where} must be one of {', '.join(map(repr, choices))}, got {shown(value)}", where)
    return value


def checked_object(value, where: str, shape: str = "an object") -> dict:
    if not isinstance(value, dict):
        raise RequestError(f"{where} must be {shape}, got {shown(value)}", where)
    return value


def checked_tool_name(name, where: str, names: set[str]) -> str:
    """A function tool's name, by OpenAI's rule (Anthropic's is the same), not one of ``names`` (added to it)."""
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise RequestError(f"{where} must be 1 to 64 letters, digits, underscores and dashes, got {shown(name)}", where)
    if name in names:
        raise RequestError(f"{where} {name!r} is offered twice", where)
    names.add(name)
    return name


def checked_schema(schema, where: str) -> dict:
    """A JSON Schema object: encodable, and not nested past reading."""
    checked_object(schema, where, "a JSON Schema object")
    schema_text(schema, where)
    return schema


def listed_objects(items, field: str, shape: str):
    """``(where, item)`` for each item of a non-empty list of objects; the list and each item checked."""
    if not isinstance(items, list) or not items:
        raise RequestError(f"{field} must be a non-empty list of {shape} objects", field)
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be a {shape} object, got {shown(item)}", where)
        yield where, item


def given_fields(body: dict, names: Iterable[str]) -> dict:
    """The fields of ``names`` that the body sends, as they are (a null counts as not sent)."""
    return {name: body[name] for name in names if body.get(name) is not None}


def translated(body: dict, field: str, translate: Callable):
    """``translate(body[field])`` when the body sends ``field``, else None (a null counts as not sent)."""
    value = body.get(field)
    return None if value is None else translate(value)


def finished_chat_body(chat: dict, body: dict, **optional) -> dict:
    """``chat`` with each ``optional`` field that has a value, and the fields of the body's ``stream``."""
    chat.update({name: value for name, value in optional.items() if value is not None})
    chat.update(stream_fields(body))
    return chat


def stream_fields(body: dict) -> dict:
    """The chat completions fields of a body's ``stream``: a stream that ends with its usage."""
    if not parse_flag(body, "stream"):
        return {}
    return {"stream": True, "stream_options": {"include_usage": True}}


def joined_text(content, where: str, part_types: tuple[str, ...]) -> str:
    """A string, or a list of text parts (of ``part_types``) joined by newlines: what a message may hold."""
    if isinstance(content, str):
        check_text(content, where)
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of text parts", where)
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in part_types:
            kind = part.get("type") if isinstance(part, dict) else part
            raise RequestError(f"{where}[{index}]: content of type {shown(kind)} is not supported here "
                               f"(text parts: {', '.join(part_types)})", f"{where}[{index}]")
        texts.append(checked_string(part.get("text"), f"{where}[{index}].text", allow_empty=True))
    return "\n".join(texts)
