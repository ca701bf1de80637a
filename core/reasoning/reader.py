"""The API server's reasoning parser, contained: a parser that fails ends that request alone.

:class:`ReasoningReader` wraps the parser ``[reasoning] parser`` names. What
its streams answer is checked to be a :class:`ReasoningPiece`; a parser that
raises or answers something else fails the request with a 500, counted
against its plugin, rather than send a wrong answer.
"""

from __future__ import annotations

from tercet.containment import ContainedFailures
from tercet.errors import RequestError
from tercet.reasoning.parser import ReasoningFrame, ReasoningParser, ReasoningPiece, ReasoningStream

PARSER_FAILURE = "reasoning_parser"


class ReasoningReader:
    def __init__(self, parser: ReasoningParser, plugin_name: str | None, failures: ContainedFailures | None = None):
        self.parser = parser
        self.plugin_name = plugin_name
        self.failures = failures

    @classmethod
    def create(cls, context, failures: ContainedFailures) -> "ReasoningReader | None":
        """The parser ``[reasoning] parser`` names; None for ``"none"``."""
        factory = context.chosen("reasoning_parsers")
        if factory is None:
            return None
        return cls(factory(context.config.reasoning), context.chosen_plugin_name("reasoning_parsers"), failures)

    @property
    def frame(self) -> ReasoningFrame | None:
        try:
            frame = self.parser.frame
            if frame is not None and not isinstance(frame, ReasoningFrame):
                raise TypeError(f"frame is {type(frame).__name__}, not a ReasoningFrame")
        except Exception:
            raise self.failure("the reasoning parser failed giving its frame") from None
        return frame

    def stream(self) -> "ReadReasoning":
        try:
            return ReadReasoning(self, self.parser.stream())
        except Exception:
            raise self.failure("the reasoning parser failed to start a stream") from None

    def split(self, text: str) -> ReasoningPiece:
        """A whole completion's reasoning and content."""
        stream = self.stream()
        return stream.feed(text) + stream.finish()

    def failure(self, description: str) -> RequestError:
        """The 500 for a parser that failed, counted against its plugin (raise it)."""
        if self.failures is not None:
            self.failures.record(PARSER_FAILURE, description, self.plugin_name)
        return RequestError(
            f"the reasoning parser (plugin {self.plugin_name!r}) failed on this answer: {description}; "
            "the server log has the details", None, 500,
        )


class ReadReasoning:
    """One completion read by the reader's parser, with the reader's checks."""

    def __init__(self, reader: ReasoningReader, stream: ReasoningStream):
        self.reader = reader
        self.stream = stream

    def feed(self, text: str) -> ReasoningPiece:
        return self._checked(self.stream.feed, text)

    def finish(self) -> ReasoningPiece:
        return self._checked(self.stream.finish)

    def _checked(self, call, *args) -> ReasoningPiece:
        try:
            piece = call(*args)
            if not isinstance(piece, ReasoningPiece):
                raise TypeError(f"it returned {type(piece).__name__}, not a ReasoningPiece")
        except Exception:
            raise self.reader.failure("the reasoning parser failed") from None
        return piece
