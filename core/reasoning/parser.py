"""The contract of a reasoning parser plugin: one model family's way of marking its reasoning.

Models such as DeepSeek-R1 and Qwen3 write their reasoning before their answer,
between markers (``<think>`` … ``</think>``). A parser reads one completion's
text as it streams, piece by piece, and says which of each piece is reasoning
and which is content; whatever the pieces' boundaries, a marker or a piece of
reasoning never comes out as content. Every API that separates reasoning (chat
completions' ``reasoning_content``, thinking blocks, reasoning items) reads
completions through this one interface::

    stream = parser.stream()
    for text in pieces:
        piece = stream.feed(text)      # ReasoningPiece(reasoning, content): what became certain
    last = stream.finish()             # what was held back, at the end of the completion

A parser also gives its :class:`ReasoningFrame`, the markers as text, so that an
output constraint (a JSON Schema, a forced tool call) can apply after the
reasoning instead of from the first token (:mod:`tercet.scheduler.grammar.grammar_backend`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningPiece:
    """What one piece of a completion adds: to the reasoning, and to the content (the answer)."""

    reasoning: str = ""
    content: str = ""

    def __add__(self, other: "ReasoningPiece") -> "ReasoningPiece":
        return ReasoningPiece(self.reasoning + other.reasoning, self.content + other.content)


@dataclass(frozen=True)
class ReasoningFrame:
    """How reasoning is written, for a grammar: ``start`` opens it ("" when the prompt
    already did, so the output starts inside it and must close it), ``end`` closes it."""

    start: str
    end: str


class ReasoningStream(abc.ABC):
    """One completion, read piece by piece."""

    @abc.abstractmethod
    def feed(self, text: str) -> ReasoningPiece:
        """Read the completion's next piece of text; what it makes certain. A tail
        that may still be the beginning of a marker is held back until it is not."""

    @abc.abstractmethod
    def finish(self) -> ReasoningPiece:
        """The completion ended: what was held back, settled."""


class ReasoningParser(abc.ABC):
    """One reasoning format, registered through ``register_reasoning_parsers``."""

    @abc.abstractmethod
    def stream(self) -> ReasoningStream:
        """A reader for one completion."""

    @property
    def frame(self) -> ReasoningFrame | None:
        """The markers as text, for a constraint to start after them; None when the
        format cannot be written as a frame (a constraint then applies from the start)."""
        return None


def split_reasoning(parser: ReasoningParser, text: str) -> ReasoningPiece:
    """A whole completion's reasoning and content."""
    stream = parser.stream()
    return stream.feed(text) + stream.finish()
