"""The built-in tool-call parser ``hermes``, registered as any third party would.

The format (Hermes 2 Pro, Qwen 2.5 and many fine-tunes since): each call is a
JSON object ``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and
``</tool_call>`` lines; tool results come back between ``<tool_response>``
and ``</tool_response>``; the tools are offered as JSON lines between
``<tools>`` and ``</tools>``. Text outside the blocks is the message's content.
"""

from __future__ import annotations

import json

from tercet.plugin_api import (
    CallObjectStream,
    ToolCall,
    ToolCallParse,
    ToolCallParser,
    ToolCallStream,
    hookimpl,
    read_call_object,
)

OPEN_CALL, CLOSE_CALL = "<tool_call>", "</tool_call>"


class HermesToolCallParser(ToolCallParser):
    call_prefix = OPEN_CALL + "\n"

    def parse(self, text: str, final: bool) -> ToolCallParse:
        return HermesCallStream().parse(text, final)

    def stream(self) -> HermesCallStream:
        return HermesCallStream()

    def tools_prompt(self, tools: list[dict]) -> str:
        lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        return (
            "You can call functions to help with the user's request. The functions you can call are described, "
            f"one JSON object each, between <tools> and </tools>:\n<tools>\n{lines}\n</tools>\n\n"
            "To call a function, reply with a JSON object holding its name and its arguments between "
            f'{OPEN_CALL} and {CLOSE_CALL}, one block per call:\n'
            f'{OPEN_CALL}\n{{"name": "<function name>", "arguments": {{<arguments as JSON>}}}}\n{CLOSE_CALL}\n'
            "The results come back between <tool_response> and </tool_response>."
        )

    def calls_text(self, calls: list[ToolCall]) -> str:
        return "\n".join(f'{OPEN_CALL}\n{{"name": {json.dumps(call.name)}, "arguments": {call.arguments}}}\n{CLOSE_CALL}'
                         for call in calls)

    def result_text(self, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"


def _without_tag_start(text: str, tag: str) -> str:
    """``text`` less a tail that could be the beginning of ``tag``."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:length]):
            return text[:-length]
    return text


@hookimpl
def register_tool_call_parsers(register):
    register("hermes", HermesToolCallParser)


class HermesCallStream(ToolCallStream):
    """One streamed completion: text and blocks before the open block are read once and
    kept; the open block is read by a :class:`CallObjectStream`, which reads only what
    each piece adds. Parsing the whole text again per piece cost seconds for a long call."""

    def __init__(self):
        self.content: list[str] = []  # settled: the text before the open block
        self.calls: list[ToolCall] = []  # settled: the calls of closed blocks
        self.position = 0  # where the text not settled yet starts
        self.open_call: CallObjectStream | None = None  # the block opened at self.position

    def parse(self, text: str, final: bool) -> ToolCallParse:
        tail: list[str] = []
        tail_calls: list[ToolCall] = []
        while True:
            opened = text.find(OPEN_CALL, self.position) if self.open_call is None else self.position
            if opened < 0:
                tail.append(text[self.position:] if final else _without_tag_start(text[self.position:], OPEN_CALL))
                break
            if self.open_call is None:
                self.content.append(text[self.position:opened])
                self.position, self.open_call = opened, CallObjectStream()
            if not self._read_block(text, final, tail, tail_calls):
                break
        joined = "".join(self.content + tail)
        # Whitespace left between blocks is dropped; with no calls
        # the text is returned as generated, so trailing whitespace waits until then.
        calls = self.calls + tail_calls
        if calls or not final:
            joined = joined.rstrip()
        return ToolCallParse(joined, tuple(calls))

    def _read_block(self, text: str, final: bool, tail: list[str], tail_calls: list[ToolCall]) -> bool:
        """Read the block opened at ``self.position``: True once it closed (and is settled)."""
        inner_start = self.position + len(OPEN_CALL)
        closed = text.find(CLOSE_CALL, inner_start)
        if closed < 0:
            inner = text[inner_start:] if final else _without_tag_start(text[inner_start:], CLOSE_CALL)
            call = self.open_call.read(inner)
            if call is not None:
                tail_calls.append(call)
            elif final:
                tail.append(text[self.position:])  # never became a call: it is text
            return False
        call = read_call_object(text[inner_start:closed])
        if call is None:
            self.content.append(text[self.position:closed + len(CLOSE_CALL)])
        else:
            self.calls.append(call)
        self.position, self.open_call = closed + len(CLOSE_CALL), None
        return True
