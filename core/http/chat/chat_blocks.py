"""A chat completion's answer as a sequence of blocks: reasoning, text, tool calls.

The Anthropic Messages API and the OpenAI Responses API answer in blocks
(content blocks; output items), where chat completions answer in one message
and its deltas. Both are served over chat completions and read the chat
answer through here: :func:`message_blocks` for a whole message,
:class:`BlockEvents` for a stream of deltas. Each API then writes the blocks in
its own shape.

This is the one place the reasoning of an answer enters those APIs: a chat
message's ``reasoning_content`` (and a delta's), as the reasoning parser of
chat completions splits it from the content, becomes a reasoning block (a
``thinking`` block; a ``reasoning`` item). Without a reasoning parser there is
none, and every answer is text and tool calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tercet.tools.cut_json import cut_object

# The chat completion field that holds an answer's reasoning, split from its content.
REASONING_FIELD = "reasoning_content"
REASONING, TEXT, TOOL_CALL = "reasoning", "text", "tool_call"


@dataclass(frozen=True)
class Block:
    """One whole block of an answer: ``text`` is the reasoning, the text, or a call's arguments (JSON text)."""

    kind: str
    text: str
    call_id: str | None = None
    name: str | None = None

    @property
    def arguments(self) -> dict:
        """A tool call's arguments as an object (an object even when the model wrote something else);
        of a call cut by the length limit, the members it wrote whole, as a client reads them from a stream."""
        try:
            arguments = json.loads(self.text or "{}")
        except ValueError:
            return cut_object(self.text)
        return arguments if isinstance(arguments, dict) else {}


def message_blocks(message: dict) -> list[Block]:
    """The blocks of a chat completion's message, in the order they were written."""
    blocks = []
    if message.get(REASONING_FIELD):
        blocks.append(Block(REASONING, message[REASONING_FIELD]))
    if message.get("content"):
        blocks.append(Block(TEXT, message["content"]))
    for call in message.get("tool_calls") or ():
        function = call["function"]
        blocks.append(Block(TOOL_CALL, function.get("arguments") or "", call["id"], function["name"]))
    return blocks


@dataclass(frozen=True)
class BlockStart:
    index: int
    block: Block  # its text empty


@dataclass(frozen=True)
class BlockDelta:
    index: int
    kind: str
    text: str


@dataclass(frozen=True)
class BlockStop:
    index: int
    block: Block  # whole


class BlockEvents:
    """One streamed chat completion's deltas, as blocks that start, grow and stop, one open at a time."""

    def __init__(self):
        self.blocks: list[Block] = []
        self.is_open = False

    def add(self, delta: dict) -> list:
        """The block events of one chat completion delta."""
        events = []
        if delta.get(REASONING_FIELD):
            events += self._text(REASONING, delta[REASONING_FIELD])
        if delta.get("content"):
            events += self._text(TEXT, delta["content"])
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            if call.get("id") is not None:  # a call's first delta names it
                events += self._start(Block(TOOL_CALL, "", call["id"], function.get("name")))
            if function.get("arguments"):
                events += self._grow(TOOL_CALL, function["arguments"])
        return events

    def finish(self) -> list:
        """The stop of the block still open, if any."""
        if not self.is_open:
            return []
        self.is_open = False
        return [BlockStop(len(self.blocks) - 1, self.blocks[-1])]

    def _text(self, kind: str, text: str) -> list:
        events = [] if self.is_open and self.blocks[-1].kind == kind else self._start(Block(kind, ""))
        return events + self._grow(kind, text)

    def _start(self, block: Block) -> list:
        events = self.finish()
        self.blocks.append(block)
        self.is_open = True
        return events + [BlockStart(len(self.blocks) - 1, block)]

    def _grow(self, kind: str, text: str) -> list:
        index = len(self.blocks) - 1
        last = self.blocks[index]
        self.blocks[index] = Block(last.kind, last.text + text, last.call_id, last.name)
        return [BlockDelta(index, kind, text)]
