"""Reading one answer for tool calls, and the assistant message that carries them.

A :class:`ToolCallReader` is one request's way of finding calls: the
configured parser for ``tool_choice`` "auto", or the bare call object for a
forced call. A parser that raises fails that request alone with a 500,
counted against its plugin.
"""

from __future__ import annotations

import uuid

from tercet.containment import ContainedFailures
from tercet.errors import RequestError
from tercet.tools.tool_calls import (
    CallObjectStream,
    ToolCall,
    ToolCallParse,
    ToolCallParser,
    ToolCallStream,
    WholeTextStream,
)

PARSER_FAILURE = "tool_call_parser"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallReader:
    def __init__(
        self,
        parser: ToolCallParser | None,
        max_calls: int | None = None,
        failures: ContainedFailures | None = None,
        plugin_name: str | None = None,
    ):
        """``parser`` None reads a forced call: the whole text is one call object."""
        self.parser = parser
        self.max_calls = max_calls
        self.failures = failures
        self.plugin_name = plugin_name

    def parse(self, text: str, final: bool) -> ToolCallParse:
        """The calls of a whole answer."""
        return self._read(self.parser.parse if self.parser is not None else CallObjectStream().parse, text, final)

    def stream(self) -> StreamedCalls:
        """A reader for one streamed completion: its text only grows, and each piece is read once."""
        if self.parser is None:
            return StreamedCalls(self, CallObjectStream())
        try:
            # A parser that does not derive from ToolCallParser may lack stream(): it parses again.
            stream = self.parser.stream() if hasattr(self.parser, "stream") else WholeTextStream(self.parser)
        except Exception:
            raise self.failure("the tool-call parser failed to start a stream") from None
        return StreamedCalls(self, stream)

    def _read(self, parse, text: str, final: bool) -> ToolCallParse:
        try:
            parsed = parse(text, final)
            if not isinstance(parsed, ToolCallParse):
                raise TypeError(f"parse returned {type(parsed).__name__}, not a ToolCallParse")
        except Exception:
            if self.parser is None:
                raise  # the server's own reading of a forced call: a bug, not a plugin's failure
            raise self.failure("the tool-call parser failed") from None
        if self.max_calls is not None and len(parsed.calls) > self.max_calls:
            parsed = ToolCallParse(parsed.content, parsed.calls[: self.max_calls])
        return parsed

    def failure(self, description: str, with_traceback: bool = True) -> RequestError:
        """The 500 for a parser that failed, counted against its plugin (raise it)."""
        if self.failures is not None:
            self.failures.record(PARSER_FAILURE, description, self.plugin_name, with_traceback)
        return RequestError(
            f"the tool-call parser (plugin {self.plugin_name!r}) failed on this answer: {description}; "
            "the server log has the details", None, 500,
        )

    def message(self, text: str) -> dict:
        """The assistant message of a whole answer."""
        parsed = self.parse(text, final=True)
        calls = [call for call in parsed.calls if call.name is not None]
        if not calls:
            return {"role": "assistant", "content": parsed.content}
        return {
            "role": "assistant",
            "content": parsed.content or None,
            "tool_calls": [call_object(new_call_id(), call) for call in calls],
        }


class StreamedCalls:
    """One streamed completion read by its reader's stream, with the reader's checks and call limit."""

    def __init__(self, reader: ToolCallReader, stream: ToolCallStream):
        self.reader = reader
        self.stream = stream

    def parse(self, text: str, final: bool) -> ToolCallParse:
        """The calls in ``text``, the completion so far (it extends the previous one)."""
        return self.reader._read(self.stream.parse, text, final)


def call_object(call_id: str, call: ToolCall) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
