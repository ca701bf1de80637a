"""Tool calls through the HTTP app (a stand-in TokenizerManager plays the model's text)."""

import json

import pytest
from http_stand_in import MODEL, STOP, StandInTokenizerManager, piece, post, sse_events

from tercet.ipc.messages import FinishReason
from tercet.tools.tool_calls import ToolCallParse, ToolCallParser

pytestmark = pytest.mark.anyio

WEATHER = {"type": "function", "function": {"name": "get_weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def pieces_of(text: str, size: int, finish=STOP) -> list:
    """``text`` cut into pieces of ``size`` characters, the last one finished."""
    parts = [text[i:i + size] for i in range(0, len(text), size)]
    return [piece(part, [1], finish if i == len(parts) - 1 else None) for i, part in enumerate(parts)]


async def chat(manager, **fields):
    return await post({"model": MODEL, "messages": ASK, "tools": [WEATHER], **fields}, "/v1/chat/completions", manager)


async def test_calls_in_the_answer_are_tool_calls():
    manager = StandInTokenizerManager([piece("Checking.\n" + CALL_TEXT, [1], STOP)])
    body = (await chat(manager)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Checking."
    [call] = message["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    # The default model's kind of template cannot render tools: the parser wrote them into a system turn.
    assert manager.templated[0][0]["role"] == "system" and "get_weather" in manager.templated[0][0]["content"]
    assert manager.generation_prefixes == [""]


async def test_a_plain_answer_stays_text_and_none_leaves_calls_unparsed():
    body = (await chat(StandInTokenizerManager([piece("It is sunny. ", [1], STOP)]))).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny. "}
    assert body["choices"][0]["finish_reason"] == "stop"
    body = (await chat(StandInTokenizerManager([piece(CALL_TEXT, [1], STOP)]), tool_choice="none")).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": CALL_TEXT}


async def test_parallel_tool_calls_false_keeps_the_first_call():
    text = CALL_TEXT + "\n" + CALL_TEXT.replace("Paris", "Rome")
    body = (await chat(StandInTokenizerManager([piece(text, [1], STOP)]))).json()
    assert len(body["choices"][0]["message"]["tool_calls"]) == 2
    body = (await chat(StandInTokenizerManager([piece(text, [1], STOP)]), parallel_tool_calls=False)).json()
    assert [c["function"]["arguments"] for c in body["choices"][0]["message"]["tool_calls"]] == ['{"city": "Paris"}']


async def test_a_forced_call_is_constrained_and_read_as_the_bare_object():
    manager = StandInTokenizerManager([piece('{"name": "get_weather", "arguments": {"city": "Oslo"}}', [1], STOP)])
    body = (await chat(manager, tool_choice={"type": "function", "function": {"name": "get_weather"}})).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    schema = json.loads(manager.requests[0].sampling_params.json_schema)
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert manager.generation_prefixes == ["<tool_call>\n"]


async def test_streamed_calls_arrive_as_deltas_that_join_up():
    text = "Let me look.\n" + CALL_TEXT + "\n" + CALL_TEXT.replace("Paris", "Rome")
    for size in (1, 3, 7, len(text)):
        chunks = sse_events(await chat(StandInTokenizerManager(pieces_of(text, size)), stream=True))
        deltas = [c["choices"][0]["delta"] for c in chunks]
        content = "".join(d.get("content") or "" for d in deltas)
        calls: dict[int, dict] = {}
        for delta in deltas:
            for part in delta.get("tool_calls", []):
                if "id" in part:  # the first delta of a call
                    assert part["index"] not in calls and part["type"] == "function"
                    calls[part["index"]] = {"id": part["id"], "name": part["function"]["name"], "arguments": ""}
                calls[part["index"]]["arguments"] += part["function"]["arguments"]
        assert content == "Let me look.", size
        assert [(c["name"], c["arguments"]) for c in calls.values()] == [
            ("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Rome"}')
        ], size
        assert len({c["id"] for c in calls.values()}) == 2
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_call_cut_by_the_length_limit_finishes_with_length():
    text = CALL_TEXT[:50]
    chunks = sse_events(await chat(StandInTokenizerManager(pieces_of(text, 4, FinishReason("length"))), stream=True))
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    body = (await chat(StandInTokenizerManager([piece(text, [1], FinishReason("length"))]))).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


class RaisingParser(ToolCallParser):
    def parse(self, text, final):
        raise ValueError("broken plugin")

    def tools_prompt(self, tools):
        return "tools"

    def calls_text(self, calls):
        return ""

    def result_text(self, content):
        return content


class ShrinkingParser(RaisingParser):
    def parse(self, text, final):
        return ToolCallParse(text[::-1])  # not a prefix of what comes next


async def test_a_failing_parser_fails_that_request_alone():
    manager = StandInTokenizerManager([piece("text", [1], STOP)])
    manager.chat_tools.parser = RaisingParser()
    response = await chat(manager)
    assert response.status_code == 500 and "tool-call parser" in response.json()["error"]["message"]
    assert manager.failures.counts[("tool_call_parser", "hermes_tool_parser")] == 1
    # A request without tools never reaches the parser.
    response = await post({"model": MODEL, "messages": ASK}, "/v1/chat/completions", manager)
    assert response.status_code == 200


async def test_a_parser_that_takes_back_streamed_text_ends_the_stream_with_an_error():
    manager = StandInTokenizerManager(pieces_of("abcdef", 2))
    manager.chat_tools.parser = ShrinkingParser()
    events = sse_events(await chat(manager, stream=True))
    error = events[-1]["error"]
    assert error["type"] == "internal_error" and "changed content after it was streamed" in error["message"]
    assert manager.failures.counts[("tool_call_parser", "hermes_tool_parser")] == 1


# A long call streamed one small piece at a time, as a model writes it: 8,000 pieces of about 6 characters.
LONG_CALL_PIECES = 8000


def long_call_pieces(forced: bool) -> list:
    head = '{"name": "get_weather", "arguments": {"city": "'
    tail = '"}}'
    if not forced:
        head, tail = "<tool_call>\n" + head, tail + "\n</tool_call>"
    parts = [head, *(f"w{i} " for i in range(LONG_CALL_PIECES)), tail]
    return [piece(part, [1], STOP if i == len(parts) - 1 else None) for i, part in enumerate(parts)]


@pytest.mark.parametrize("forced", [False, True], ids=["hermes", "forced"])
async def test_a_long_streamed_call_is_read_once_not_again_per_piece(forced):
    """Each piece is read once: parsing the whole call again per piece cost 7.7 s of the
    API loop's CPU for 8,000 pieces (quadratic); read incrementally it is a fraction of a second."""
    import time

    choice = {"type": "function", "function": {"name": "get_weather"}} if forced else "auto"
    manager = StandInTokenizerManager(long_call_pieces(forced))
    started = time.process_time()
    chunks = sse_events(await chat(manager, stream=True, tool_choice=choice))
    cpu_seconds = time.process_time() - started
    arguments = "".join(part["function"]["arguments"] for chunk in chunks
                        for part in chunk["choices"][0]["delta"].get("tool_calls", []))
    assert arguments == '{"city": "' + "".join(f"w{i} " for i in range(LONG_CALL_PIECES)) + '"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    print(f"{LONG_CALL_PIECES} pieces ({'forced' if forced else 'hermes'}): {cpu_seconds:.2f} s of CPU")
    # The HTTP stream itself costs about as much per piece as before; the parse no longer grows with the call.
    assert cpu_seconds < 4.0
