"""The built-in tool-call parser ``hermes``, registered as any third party would.

The format (Hermes 2 Pro, Qwen 2.5 and many fine-tunes since): each call is a
JSON object ``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and
``</tool_call>`` lines; tool results come back between ``<tool_response>``
and ``</tool_response>``; the tools are offered as JSON lines between
``<tools>`` and ``</tools>``. Text outside the blocks is the message's content.
"""

from __future__ import annotations

import json

from tercet.plugin_api import ToolCall, ToolCallParse, ToolCallParser, hookimpl, read_call_object

OPEN_CALL, CLOSE_CALL = "<tool_call>", "</tool_call>"


class HermesToolCallParser(ToolCallParser):
    call_prefix = OPEN_CALL + "\n"

    def parse(self, text: str, final: bool) -> ToolCallParse:
        content: list[str] = []
        calls: list[ToolCall] = []
        position = 0
        while position is not None:
            position = _read_up_to_next_block(text, position, final, content, calls)
        joined = "".join(content)
        # Whitespace left between blocks is dropped; with no calls the text is
        # returned as generated, so trailing whitespace waits until then.
        if calls or not final:
            joined = joined.rstrip()
        return ToolCallParse(joined, tuple(calls))

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


def _read_up_to_next_block(text: str, position: int, final: bool, content: list[str], calls: list[ToolCall]):
    """Read the text from ``position`` through the next call block into ``content`` and ``calls``:
    the position past that block, or None when the text has no more."""
    opened = text.find(OPEN_CALL, position)
    if opened < 0:
        # While streaming, a tail that may be the start of "<tool_call>" waits.
        content.append(text[position:] if final else _without_tag_start(text[position:], OPEN_CALL))
        return None
    content.append(text[position:opened])
    inner_start = opened + len(OPEN_CALL)
    closed = text.find(CLOSE_CALL, inner_start)
    if closed < 0:
        _read_open_block(text, opened, final, content, calls)
        return None
    call = read_call_object(text[inner_start:closed])
    if call is None:
        content.append(text[opened:closed + len(CLOSE_CALL)])
    else:
        calls.append(call)
    return closed + len(CLOSE_CALL)


def _read_open_block(text: str, opened: int, final: bool, content: list[str], calls: list[ToolCall]) -> None:
    """The last block is still open (or was cut off by the length limit)."""
    inner_start = opened + len(OPEN_CALL)
    inner = text[inner_start:] if final else _without_tag_start(text[inner_start:], CLOSE_CALL)
    call = read_call_object(inner)
    if call is not None:
        calls.append(call)
    elif final:
        content.append(text[opened:])  # never became a call: it is text
