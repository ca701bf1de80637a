"""Reading a JSON object that is still being written, for streamed tool calls.

:func:`scan_object` walks the top level of an object such as
``{"name": "f", "arguments": {"city": "Pa`` and reports where each member's
value starts and, once it is complete, where it ends. A value's text is
taken as written, never re-serialised, so the arguments streamed piece by
piece join up to exactly the arguments of the finished call.

A streamed call is read once per piece, each time with a longer text, so an
:class:`ObjectScanner` keeps what it has read: the members already complete
and how far into the one being written it got (:class:`ValueEnd`). Each scan
reads only the new characters; reading the whole call again per piece made
8,000 pieces cost seconds of the API process's loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

WHITESPACE = " \t\n\r"
# What matters inside a string (its end, an escape) and outside one (nesting, a string's start).
_IN_STRING = re.compile(r'["\\]')
_OUTSIDE_STRING = re.compile(r'["{}\[\]]')


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
    return ObjectScanner(start).scan(text)


def value_end(text: str, start: int) -> int | None:
    """Index just past the JSON value at ``text[start]``; None if it is not finished.

    Strings, objects and arrays end with their closing character; a number
    or literal ends at the first character that cannot continue it (so one
    at the very end of the text counts as unfinished). The value's inside
    is not checked here: ``json.loads`` does that on the finished text.
    """
    return ValueEnd(start).find(text)


class ValueEnd:
    """:func:`value_end` for a text that only grows: each call goes on from where the previous one stopped."""

    def __init__(self, start: int):
        self.start = start
        self.position = start  # the next character to read
        self.depth = 0  # containers open
        self.in_string = False
        self.end: int | None = None

    def find(self, text: str) -> int | None:
        if self.end is None:
            if text[self.start] in '"{[':
                self.end = self._structure_end(text)
            else:
                self.end = self._literal_end(text)
        return self.end

    def _literal_end(self, text: str) -> int | None:
        position = self.position
        while position < len(text) and text[position] not in WHITESPACE + ",}]":
            position += 1
        self.position = position
        return position if position < len(text) else None

    def _structure_end(self, text: str) -> int | None:
        position = self.position
        while True:
            match = (_IN_STRING if self.in_string else _OUTSIDE_STRING).search(text, position)
            if match is None:
                # All read; past the end only when an escape's character is still to come.
                self.position = max(position, len(text))
                return None
            position = match.end()
            character = match.group()
            if character == "\\":
                position += 1  # the escaped character, even when it has not arrived yet
            elif character == '"':
                self.in_string = not self.in_string
            else:
                self.depth += 1 if character in "{[" else -1
            if self.depth == 0 and not self.in_string:
                return position


class ObjectScanner:
    """:func:`scan_object` for a text that only grows (a streamed call): each scan
    goes on from the members already read, so it reads only what is new."""

    def __init__(self, start: int = 0):
        self.start = start
        self.members: dict[str, MemberSpan] = {}
        self.position: int | None = None  # past "{", or past the last complete member
        self.writing: tuple[str, ValueEnd] | None = None  # the member whose value is being written
        self.settled: ObjectScan | None = None  # the answer once the object closed or broke

    def scan(self, text: str) -> ObjectScan:
        """The object in ``text``, which extends the text of the previous scan."""
        if self.settled is None and self.position is None:
            opening = self._open(text)
            if opening is not None:
                return opening
        while self.settled is None:
            if self.writing is not None:
                key, value = self.writing
                end = value.find(text)
                if end is None:
                    return ObjectScan({**self.members, key: MemberSpan(value.start, None)}, None)
                self.members[key] = MemberSpan(value.start, end)
                self.writing, self.position = None, end
            answer = self._start_member(text)
            if answer is not None:
                return answer
        return self.settled

    def _open(self, text: str) -> ObjectScan | None:
        """Past the opening brace: None once there, else the scan's answer (nothing yet, or no object)."""
        position = _skip_whitespace(text, self.start)
        if position == len(text):
            return ObjectScan({}, None)
        if text[position] != "{":
            self.settled = INVALID
            return INVALID
        self.position = position + 1
        return None

    def _start_member(self, text: str) -> ObjectScan | None:
        """Read the next member's key up to its value's first character: None once its value
        is being read, else the scan's answer (unfinished here, or settled)."""
        key_start = _key_start(text, self.position, self.members)
        if isinstance(key_start, ObjectScan):
            return self._settle(key_start)
        key_end = value_end(text, key_start)
        if key_end is None:
            return self._unfinished()
        try:
            key = json.loads(text[key_start:key_end])
        except ValueError:
            return self._settle(INVALID)
        position = _skip_whitespace(text, key_end)
        if position == len(text):
            return self._unfinished()
        if text[position] != ":":
            return self._settle(INVALID)
        value_start = _skip_whitespace(text, position + 1)
        if value_start == len(text):
            return self._unfinished()
        self.writing = (key, ValueEnd(value_start))
        return None

    def _unfinished(self) -> ObjectScan:
        return ObjectScan(dict(self.members), None)

    def _settle(self, answer: ObjectScan) -> ObjectScan:
        """``answer`` from ``_key_start``: cut off (still open), or closed or broken for good."""
        if answer.end is None and answer.valid:
            return self._unfinished()
        self.settled = answer if not answer.valid else ObjectScan(dict(self.members), answer.end)
        return self.settled


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


def _skip_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position] in WHITESPACE:
        position += 1
    return position
