"""Field checks shared by the protocols translated into chat completions (Anthropic's, the Responses API)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.openai_params import parse_flag


def checked_string(value, where: str, allow_empty: bool = False) -> str:
    """A string field (non-empty unless ``allow_empty``), as the protocol's body named it."""
    if not isinstance(value, str) or not (value or allow_empty):
        raise RequestError(f"{where} must be a non-empty string, got {shown(value)}", where)
    check_text(value, where)
    return value


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
