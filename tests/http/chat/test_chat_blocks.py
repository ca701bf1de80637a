"""A chat answer as blocks: whole messages, and streams of deltas in any split."""

from tercet.http.chat.chat_blocks import (
    REASONING,
    TEXT,
    TOOL_CALL,
    Block,
    BlockDelta,
    BlockEvents,
    BlockStart,
    BlockStop,
    message_blocks,
)

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_a_message_is_its_reasoning_then_its_text_then_its_calls():
    message = {"role": "assistant", "reasoning_content": "Think.", "content": "Sure.", "tool_calls": [CALL]}
    assert message_blocks(message) == [
        Block(REASONING, "Think."), Block(TEXT, "Sure."), Block(TOOL_CALL, '{"city": "Paris"}', "call_1", "get_weather"),
    ]
    assert message_blocks({"role": "assistant", "content": None, "tool_calls": [CALL]})[0].arguments == {"city": "Paris"}
    assert Block(TOOL_CALL, "not json", "c", "f").arguments == {}


def test_deltas_open_one_block_at_a_time_and_the_blocks_add_up():
    events = BlockEvents()
    seen = []
    for delta in [{"reasoning_content": "Th"}, {"reasoning_content": "ink."}, {"content": "Sure"}, {"content": "."},
                  {"tool_calls": [{"index": 0, **CALL, "function": {"name": "get_weather", "arguments": ""}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, {}]:
        seen += events.add(delta)
    seen += events.finish()
    starts = [event for event in seen if isinstance(event, BlockStart)]
    stops = [event for event in seen if isinstance(event, BlockStop)]
    assert [event.block.kind for event in starts] == [REASONING, TEXT, TOOL_CALL]
    assert [event.index for event in stops] == [0, 1, 2]
    assert [event.block for event in stops] == message_blocks(
        {"reasoning_content": "Think.", "content": "Sure.", "tool_calls": [CALL]})
    assert [event.text for event in seen if isinstance(event, BlockDelta) and event.index == 2] == ['{"city": ', '"Paris"}']
    assert events.finish() == []
