"""The values of a JSON object cut short: what a tool call cut by the length limit had written whole.

A call cut by ``max_tokens`` has arguments such as ``{"city": "Paris", "unit": "cel``.
An API that answers with the arguments as an object (Anthropic's ``tool_use``
``input``) gives the members written whole, ``{"city": "Paris"}``: a string,
number or literal that was still being written is left out with its key, and
the objects and lists open at the cut are closed where it fell. It is how
Anthropic's SDK reads the same call from a stream of ``input_json_delta``s, so
the answer reads the same streamed or not.
"""

from __future__ import annotations

import json
import re

WHITESPACE = " \t\n\r"
# A number or a literal, as far as it goes (a cut one is found by what follows it: the end of the text).
SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
NUMBER_CHARACTERS = frozenset("0123456789+-.eE")
LITERALS = ("true", "false", "null")


class _Cut(Exception):
    """The text ends inside a value that is not whole: the value is left out."""


def cut_object(text: str) -> dict:
    """The members of the object ``text`` begins, those written whole; ``{}`` when it is no object."""
    start = _skip(text, 0)
    if start >= len(text) or text[start] != "{":
        return {}
    try:
        value, _, _ = _object(text, start + 1)
    except ValueError:  # not JSON after all
        return {}
    return value


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in WHITESPACE:
        index += 1
    return index


def _value(text: str, index: int) -> tuple[object, int, bool]:
    """``(value, end, whole)`` of the value at ``text[index]``; a container cut short is not whole."""
    if index >= len(text):
        raise _Cut
    first = text[index]
    if first == "{":
        return _object(text, index + 1)
    if first == "[":
        return _list(text, index + 1)
    if first == '"':
        return _string(text, index)
    return _scalar(text, index)


def _string(text: str, index: int) -> tuple[str, int, bool]:
    end = index + 1
    while True:
        end = text.find('"', end)
        if end < 0:
            raise _Cut
        backslashes = len(text[index:end]) - len(text[index:end].rstrip("\\"))
        if backslashes % 2 == 0:
            return json.loads(text[index:end + 1]), end + 1, True
        end += 1


def _scalar(text: str, index: int) -> tuple[object, int, bool]:
    found = SCALAR.match(text, index)
    rest = text[found.end() if found else index:]
    if _ends_inside(found, rest):
        raise _Cut
    if found is None:
        raise ValueError(f"not JSON at {index}")
    return json.loads(found.group()), found.end(), True


def _ends_inside(found: re.Match | None, rest: str) -> bool:
    """Whether the text ends inside a number or a literal ("12.", "-", "tr"); ``rest``: what follows the match."""
    if rest and set(rest) <= NUMBER_CHARACTERS:
        return True
    return found is None and any(literal.startswith(rest) for literal in LITERALS)


def _members(text: str, index: int, close: str, read_member):
    """Read ``read_member`` after each comma until ``close``; ``(end, whole)`` at the close or the cut."""
    index = _skip(text, index)
    if index < len(text) and text[index] == close:
        return index + 1, True
    while index < len(text):
        try:
            index, whole = read_member(_skip(text, index))
        except _Cut:
            return len(text), False
        index = _skip(text, index)
        if not whole or index >= len(text):
            return index, False
        if text[index] == close:
            return index + 1, True
        if text[index] != ",":
            raise ValueError(f"not JSON at {index}")
        index += 1
    return index, False


def _object(text: str, index: int) -> tuple[dict, int, bool]:
    members: dict = {}

    def read_member(at: int) -> tuple[int, bool]:
        if at >= len(text):
            raise _Cut
        if text[at] != '"':
            raise ValueError(f"not JSON at {at}")
        key, at, _ = _string(text, at)
        at = _skip(text, at)
        if at >= len(text):
            raise _Cut
        if text[at] != ":":
            raise ValueError(f"not JSON at {at}")
        value, at, whole = _value(text, _skip(text, at + 1))
        members[key] = value
        return at, whole

    end, whole = _members(text, index, "}", read_member)
    return members, end, whole


def _list(text: str, index: int) -> tuple[list, int, bool]:
    items: list = []

    def read_item(at: int) -> tuple[int, bool]:
        value, at, whole = _value(text, at)
        items.append(value)
        return at, whole

    end, whole = _members(text, index, "]", read_item)
    return items, end, whole
