import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.plugins.hermes_tool_parser import HermesToolCallParser
from tercet.tools.tool_calls import ToolCall, ToolCallParse

PARSER = HermesToolCallParser()


def block(name, arguments, separators=None) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, separators=separators)}\n</tool_call>"


def test_text_without_calls_is_returned_as_generated():
    assert PARSER.parse("Paris is sunny. \n", final=True) == ToolCallParse("Paris is sunny. \n")


def test_calls_are_found_with_their_arguments_as_written():
    text = "Let me check.\n" + block("get_weather", {"city": "Paris"}) + "\n" + block("get_time", {"tz": "CET"})
    parsed = PARSER.parse(text, final=True)
    assert parsed.content == "Let me check."
    assert parsed.calls == (ToolCall("get_weather", '{"city": "Paris"}'), ToolCall("get_time", '{"tz": "CET"}'))


def test_call_variants_models_write():
    parsed = PARSER.parse('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>', final=True)
    assert parsed.calls == (ToolCall("f", '{"a": 1}'),)
    # Arguments encoded as a JSON string are decoded; no arguments at all are {}.
    parsed = PARSER.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', final=True)
    assert parsed.calls == (ToolCall("f", '{"a": 1}'),)
    assert PARSER.parse('<tool_call>{"name": "f"}</tool_call>', final=True).calls == (ToolCall("f", "{}"),)


def test_a_block_that_is_no_call_stays_text():
    text = "A <tool_call>not json</tool_call> B"
    assert PARSER.parse(text, final=True) == ToolCallParse(text)
    assert PARSER.parse('<tool_call>{"name": 3}</tool_call>', final=True).calls == ()


def test_a_call_cut_off_by_the_length_limit_keeps_what_was_written():
    parsed = PARSER.parse('<tool_call>\n{"name": "f", "arguments": {"a": [1, 2', final=True)
    assert parsed.calls == (ToolCall("f", '{"a": [1, 2'),)


def test_while_streaming_a_possible_tag_start_waits():
    assert PARSER.parse("Sure <tool_", final=False) == ToolCallParse("Sure")
    parsed = PARSER.parse('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_c', final=False)
    assert parsed.calls == (ToolCall("f", '{"a": 1}'),)
    # Before its name is complete, a call is not reported at all.
    assert PARSER.parse('<tool_call>\n{"name": "get_wea', final=False).calls == ()


def test_the_prompt_side_writes_what_the_parser_reads():
    calls = [ToolCall("get_weather", '{"city": "Paris"}'), ToolCall("f", "{}")]
    assert PARSER.parse(PARSER.calls_text(calls), final=True).calls == tuple(calls)
    offer = PARSER.tools_prompt([{"type": "function", "function": {"name": "get_weather"}}])
    assert '"name": "get_weather"' in offer and "<tool_call>" in offer
    assert PARSER.result_text("18 C") == "<tool_response>\n18 C\n</tool_response>"
    assert PARSER.parse(PARSER.call_prefix + '{"name": "f", "arguments": {}}\n</tool_call>', True).calls[0].name == "f"


NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
ARGUMENTS = st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4) | st.none(), max_size=3)
PIECES = st.lists(
    st.one_of(
        st.text(alphabet="ab <>_/\n{}\"", max_size=8),
        st.builds(block, NAMES, ARGUMENTS, st.sampled_from([None, (",", ":")])),
        st.just("<tool_call>\nnot a call</tool_call>"),
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(PIECES)
def test_parses_of_prefixes_only_grow(pieces):
    # The rule every parser keeps so the server can stream: each longer prefix
    # reports a longer content and longer arguments, never different ones.
    text = "".join(pieces)
    final = PARSER.parse(text, final=True)
    previous = ToolCallParse("")
    for cut in range(len(text) + 1):
        parsed = PARSER.parse(text[:cut], final=False)
        assert final.content.startswith(parsed.content)
        assert parsed.content.startswith(previous.content)
        assert len(parsed.calls) <= len(final.calls)
        for call, last in zip(parsed.calls, final.calls):
            assert call.name == last.name and last.arguments.startswith(call.arguments)
        previous = parsed


@settings(max_examples=150, deadline=None)
@given(PIECES, st.lists(st.integers(0, 12), max_size=40))
def test_a_stream_reads_each_piece_once_and_answers_as_parsing_the_whole_text(pieces, cuts):
    # The stream keeps what it has read; fed longer and longer prefixes (some the same
    # length again) it must answer exactly what a parse of that prefix answers.
    text = "".join(pieces)
    stream = PARSER.stream()
    length = 0
    for step in cuts:
        length = min(len(text), length + step)
        assert stream.parse(text[:length], final=False) == PARSER.parse(text[:length], final=False)
    assert stream.parse(text, final=True) == PARSER.parse(text, final=True)
