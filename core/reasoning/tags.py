"""Reasoning between two tags, read incrementally: the engine of the built-in ``think`` parser.

What is reasoning and what is content, in a whole completion:

- the text between a start tag and the next end tag is reasoning; with
  ``starts_inside`` (a chat template that opens the reasoning in the prompt) so
  is the text from the start to the first end tag; reasoning left open runs to
  the end of the completion;
- the tags themselves are nobody's: a stray end tag is dropped too;
- whitespace right after an end tag is dropped, and so is whitespace before a
  start tag at the very beginning (``"\\n<think>"``), so the answer does not start
  with the blank lines models write around their reasoning.

A stream reaches the same split whatever the pieces: it holds back a tail that
may still become a tag (``"</thi"``) and whitespace whose fate a later piece decides.
"""

from __future__ import annotations

from tercet.reasoning.parser import ReasoningFrame, ReasoningParser, ReasoningPiece, ReasoningStream


class TaggedReasoningParser(ReasoningParser):
    def __init__(self, start_tag: str, end_tag: str, starts_inside: bool = False):
        if not start_tag or not end_tag:
            raise ValueError("a reasoning parser's tags must not be empty")
        self.start_tag = start_tag
        self.end_tag = end_tag
        self.starts_inside = starts_inside

    def stream(self) -> "TaggedReasoningStream":
        return TaggedReasoningStream(self.start_tag, self.end_tag, self.starts_inside)

    @property
    def frame(self) -> ReasoningFrame:
        return ReasoningFrame("" if self.starts_inside else self.start_tag, self.end_tag)


def _tag_start_length(text: str, tags: tuple[str, ...]) -> int:
    """The length of the longest tail of ``text`` that begins one of ``tags`` (and is not all of it)."""
    for length in range(min(max(map(len, tags)) - 1, len(text)), 0, -1):
        tail = text[-length:]
        if any(tag.startswith(tail) for tag in tags):
            return length
    return 0


class TaggedReasoningStream(ReasoningStream):
    def __init__(self, start_tag: str, end_tag: str, starts_inside: bool):
        self.start_tag = start_tag
        self.end_tag = end_tag
        self.inside = starts_inside
        self.held = ""  # text read and not settled yet
        self.at_start = not starts_inside  # nothing but whitespace read so far
        self.after_end_tag = False  # whitespace here is dropped

    def feed(self, text: str) -> ReasoningPiece:
        self.held += text
        reasoning: list[str] = []
        content: list[str] = []
        while self.held and self._step(reasoning, content):
            pass
        return ReasoningPiece("".join(reasoning), "".join(content))

    def finish(self) -> ReasoningPiece:
        held, self.held = self.held, ""
        if self.inside:
            return ReasoningPiece(reasoning=held)
        return ReasoningPiece(content="" if self.after_end_tag else held)

    def _step(self, reasoning: list[str], content: list[str]) -> bool:
        """Settle what ``self.held`` allows; True to go on with what is left."""
        if self.inside:
            return self._read_reasoning(reasoning)
        if self.after_end_tag or self.at_start:
            return self._read_leading_whitespace()
        return self._read_content(content)

    def _read_reasoning(self, reasoning: list[str]) -> bool:
        end = self.held.find(self.end_tag)
        if end < 0:
            keep = _tag_start_length(self.held, (self.end_tag,))
            reasoning.append(self.held[:len(self.held) - keep])
            self.held = self.held[len(self.held) - keep:]
            return False
        reasoning.append(self.held[:end])
        self.held = self.held[end + len(self.end_tag):]
        self.inside, self.after_end_tag = False, True
        return True

    def _read_leading_whitespace(self) -> bool:
        stripped = self.held.lstrip()
        if not stripped:
            return False  # all whitespace: a later piece decides
        if self.after_end_tag:
            self.held, self.after_end_tag = stripped, False
            return True
        if stripped.startswith(self.start_tag):
            self.held = stripped  # the whitespace before the first reasoning is dropped
        elif self.start_tag.startswith(stripped):
            return False  # may still become the start tag
        self.at_start = False
        return True

    def _read_content(self, content: list[str]) -> bool:
        found = [(at, tag) for tag in (self.start_tag, self.end_tag) if (at := self.held.find(tag)) >= 0]
        if not found:
            keep = _tag_start_length(self.held, (self.start_tag, self.end_tag))
            content.append(self.held[:len(self.held) - keep])
            self.held = self.held[len(self.held) - keep:]
            return False
        at, tag = min(found)
        content.append(self.held[:at])
        self.held = self.held[at + len(tag):]
        if tag == self.start_tag:
            self.inside = True
        else:
            self.after_end_tag = True  # a stray end tag: dropped like any other
        return True
