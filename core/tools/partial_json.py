"""Reading a JSON object that is still being written, for streamed tool calls.

:func:`scan_object` walks the top level of an object such as
``{"name": "f", "arguments": {"city": "Pa`` and reports where each member's
value starts and, once it is complete, where it ends. A value's text is
taken as written, never re-serialised, so the arguments streamed piece by
piece join up to exactly the arguments of the finished call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

WHITESPACE = " \t\n\r"
CLOSING = {"{": "}", "[": "]"}


@dataclass(frozen=True)
class MemberSpan:
    """Where one member's value lies in the text: ``text[start:end]``; ``end`` is None while unfinished."""

    start: int
    end: int | None

    def text(self, source: str) -> str:
        return source[self.start:self.end] if self.end is not None else source[self.start:]


@dataclass(frozen=True)
class ObjectScan:
    members: dict[str, MemberSpan]
    # Index just past the closing brace; None while the object is open.
    end: int | None
    # False when the text cannot be (the start of) a JSON object.
    valid: bool = True


INVALID = ObjectScan({}, None, valid=False)


def scan_object(text: str, start: int = 0) -> ObjectScan:
    """The members of the object that starts at ``text[start:]`` (after any whitespace)."""
    position = _skip_whitespace(text, start)
    if position == len(text):
        return ObjectScan({}, None)
    if text[position] != "{":
        return INVALID
    members: dict[str, MemberSpan] = {}
    position += 1
    while True:
        step = _read_member(text, position, members)
        if isinstance(step, ObjectScan):
            return step
        position = step


def _read_member(text: str, position: int, members: dict[str, MemberSpan]) -> int | ObjectScan:
    """Read the next member into ``members``: the position past it, or the scan's
    answer when the object closes, breaks or is cut off here."""
    key_start = _key_start(text, position, members)
    if isinstance(key_start, ObjectScan):
        return key_start
    key_end = value_end(text, key_start)
    if key_end is None:
        return ObjectScan(members, None)
    key = json.loads(text[key_start:key_end])
    position = _skip_whitespace(text, key_end)
    if position == len(text):
        return ObjectScan(members, None)
    if text[position] != ":":
        return INVALID
    value_start = _skip_whitespace(text, position + 1)
    if value_start == len(text):
        return ObjectScan(members, None)
    end = value_end(text, value_start)
    members[key] = MemberSpan(value_start, end)
    return ObjectScan(members, None) if end is None else end


def _key_start(text: str, position: int, members: dict[str, MemberSpan]) -> int | ObjectScan:
    """Where the next member's key starts (past whitespace and a comma), or the scan's answer."""
    position = _skip_whitespace(text, position)
    if position == len(text):
        return ObjectScan(members, None)
    if text[position] == "}":
        return ObjectScan(members, position + 1)
    if text[position] == ",":
        if not members:
            return INVALID
        position = _skip_whitespace(text, position + 1)
        if position == len(text):
            return ObjectScan(members, None)
    elif members:
        return INVALID  # two members without a comma between
    return position if text[position] == '"' else INVALID


def value_end(text: str, start: int) -> int | None:
    """Index just past the JSON value at ``text[start]``; None if it is not finished.

    Strings, objects and arrays end with their closing character; a number
    or literal ends at the first character that cannot continue it (so one
    at the very end of the text counts as unfinished). The value's inside
    is not checked here: ``json.loads`` does that on the finished text.
    """
    first = text[start]
    if first == '"':
        return _string_end(text, start)
    if first in CLOSING:
        return _container_end(text, start)
    position = start
    while position < len(text) and text[position] not in WHITESPACE + ",}]":
        position += 1
    return position if position < len(text) else None


def _string_end(text: str, start: int) -> int | None:
    position = start + 1
    while position < len(text):
        character = text[position]
        if character == "\\":
            position += 2
            continue
        if character == '"':
            return position + 1
        position += 1
    return None


def _container_end(text: str, start: int) -> int | None:
    depth = 0
    position = start
    while position < len(text):
        character = text[position]
        if character == '"':
            end = _string_end(text, position)
            if end is None:
                return None
            position = end
            continue
        if character in "{[":
            depth += 1
        elif character in "}]":
            depth -= 1
            if depth == 0:
                return position + 1
        position += 1
    return None


def _skip_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position] in WHITESPACE:
        position += 1
    return position
