"""Tool calls in a model's output, and the parsers (a plugin kind) that find them.

A model offered tools answers either with text or with calls written in its
own format (Hermes-style ``<tool_call>{...}</tool_call>`` blocks, say). A
:class:`ToolCallParser` knows one such format both ways: it finds the calls
in generated text, and it writes tools, past calls and tool results as text
for a model whose chat template cannot render them.

Parsing is incremental so calls can stream: each streamed completion gets
its own :meth:`ToolCallParser.stream`, whose ``parse(text, final=False)`` is
called on each longer prefix of the output, and what it returns must only
grow. (The default stream parses the whole text again each time, which costs
time quadratic in the answer's length; a parser overrides ``stream`` to read
only what each piece adds, as ``hermes`` does.) The content, and each call's
arguments, must be prefixes of what the final parse returns; a call's name,
once given, never changes, and calls are only ever appended. The server
sends the difference between two parses as OpenAI's streamed ``tool_calls``
deltas, so a parser that breaks the rule would send text it must later take
back; the server checks the rule and fails the request rather than send a
wrong stream.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass

from tercet.tools.partial_json import MemberSpan, ObjectScan, ObjectScanner, scan_object

# The member that holds a call's arguments; some models write "parameters".
ARGUMENT_KEYS = ("arguments", "parameters")


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it (or the part written so far, while streaming)."""

    # None while a streamed call's name is not complete yet.
    name: str | None
    # The arguments object as JSON text, exactly as written (a prefix of it while streaming).
    arguments: str = ""


@dataclass(frozen=True)
class ToolCallParse:
    """Generated text split into what is said and what is called."""

    # The text that is not a call. In a final parse with calls, trailing
    # whitespace is dropped; with none, it is the whole text as generated.
    content: str
    calls: tuple[ToolCall, ...] = ()


class ToolCallParser(ABC):
    """One tool-call format, registered through ``register_tool_call_parsers``."""

    # Written after the generation prompt when a call is forced (``tool_choice``
    # "required" or a named function), so the model starts a call in its own
    # format; the forced call itself is then the bare JSON object
    # ``{"name": ..., "arguments": {...}}``, kept to the function's schema by
    # the grammar backend.
    call_prefix: str = ""

    @abstractmethod
    def parse(self, text: str, final: bool) -> ToolCallParse:
        """The calls in ``text`` (the output so far; all of it when ``final``)."""

    def stream(self) -> ToolCallStream:
        """A reader for one streamed completion, called with texts that only grow."""
        return WholeTextStream(self)

    @abstractmethod
    def tools_prompt(self, tools: list[dict]) -> str:
        """System-prompt text offering ``tools`` (OpenAI tool objects), for a
        chat template that does not render tools itself."""

    @abstractmethod
    def calls_text(self, calls: list[ToolCall]) -> str:
        """An assistant turn's past calls, written as the model writes them."""

    @abstractmethod
    def result_text(self, content: str) -> str:
        """A tool's result as the model should read it, in a user turn."""


class ToolCallStream(ABC):
    """One streamed completion's calls, read as its text grows."""

    @abstractmethod
    def parse(self, text: str, final: bool) -> ToolCallParse:
        """The calls in ``text``, which extends the text of the previous call (all of it when ``final``)."""


class WholeTextStream(ToolCallStream):
    """The default stream: the parser's ``parse`` on the whole text each time."""

    def __init__(self, parser: ToolCallParser):
        self.parser = parser

    def parse(self, text: str, final: bool) -> ToolCallParse:
        return self.parser.parse(text, final)


class CallObjectStream(ToolCallStream):
    """:func:`read_call_object` for a text that only grows: the text is one bare call
    object (a forced call's), and each read goes on where the previous one stopped."""

    def __init__(self):
        self.scanner = ObjectScanner()

    def read(self, text: str) -> ToolCall | None:
        return read_call_object(text, self.scanner)

    def parse(self, text: str, final: bool) -> ToolCallParse:
        call = self.read(text)
        if call is None:
            # Only when the length limit cut the call before its name was done. The text is the
            # server's own call object, never the model's answer: none of it is content.
            return ToolCallParse("")
        return ToolCallParse("", (call,))


def read_call_object(text: str, scanner: ObjectScanner | None = None) -> ToolCall | None:
    """The call in a (possibly unfinished) ``{"name": ..., "arguments": {...}}``;
    None when ``text`` is not such an object or its name is not readable yet.

    The arguments are the text written so far. An arguments member given as
    a JSON string (some models encode the object) is taken once complete,
    decoded; a call whose object closed without arguments has ``"{}"``. With a
    ``scanner``, ``text`` extends the text it scanned last, and only the new
    part is read.
    """
    scan = scanner.scan(text) if scanner is not None else scan_object(text)
    name = _call_name(scan, text)
    if name is None:
        return None
    span = next((scan.members[key] for key in ARGUMENT_KEYS if key in scan.members), None)
    if span is None:
        return ToolCall(name, "{}" if scan.end is not None else "")
    return ToolCall(name, _arguments_text(text, span))


def _call_name(scan: ObjectScan, text: str) -> str | None:
    """The call's name once it is written whole; None before, or when it is not a string."""
    if not scan.valid:
        return None
    name_span = scan.members.get("name")
    if name_span is None or name_span.end is None:
        return None
    try:
        name = json.loads(name_span.text(text))
    except ValueError:
        return None
    return name if isinstance(name, str) else None


def _arguments_text(text: str, span: MemberSpan) -> str:
    if text[span.start] in "{[":
        return span.text(text)  # the part written so far is safe to send
    if span.end is None:
        return ""  # a string or number: only usable once complete
    value = span.text(text)
    try:
        decoded = json.loads(value)
    except ValueError:
        return value
    return decoded if isinstance(decoded, str) else value
