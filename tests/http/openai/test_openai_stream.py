"""Chat answers that reason first: reasoning_content, whole and streamed, with tools and constraints."""

import json

import pytest
from http_stand_in import MODEL, STOP, StandInTokenizerManager, piece, post, sse_events

from tercet.reasoning.parser import ReasoningParser
from tercet.reasoning.reader import ReasoningReader
from tercet.reasoning.tags import TaggedReasoningParser

pytestmark = pytest.mark.anyio

ASK = [{"role": "user", "content": "Two and two?"}]
ANSWER = "<think>Two and two make four.</think>\n\nFour."
WEATHER = {"type": "function", "function": {"name": "get_weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def reasoning_manager(script, parser: ReasoningParser | None = None) -> StandInTokenizerManager:
    manager = StandInTokenizerManager(script)
    manager.reasoning = ReasoningReader(parser or TaggedReasoningParser("<think>", "</think>"), "think_reasoning_parser",
                                        manager.failures)
    return manager


def pieces_of(text: str, size: int) -> list:
    parts = [text[i:i + size] for i in range(0, len(text), size)]
    return [piece(part, [1], STOP if i == len(parts) - 1 else None) for i, part in enumerate(parts)]


async def chat(manager, **fields):
    return await post({"model": MODEL, "messages": ASK, **fields}, "/v1/chat/completions", manager)


def streamed_message(events: list[dict]) -> dict[str, str]:
    joined = {"reasoning_content": "", "content": ""}
    for event in events:
        for choice in event["choices"]:
            for key in joined:
                joined[key] += choice["delta"].get(key) or ""
    return joined


async def test_the_answer_carries_its_reasoning_apart():
    body = (await chat(reasoning_manager([piece(ANSWER, [1], STOP)]))).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Four.",
                                             "reasoning_content": "Two and two make four."}


@pytest.mark.parametrize("size", [1, 2, 3, 7])
async def test_a_stream_sends_reasoning_deltas_and_never_a_tag_as_content(size):
    events = sse_events(await chat(reasoning_manager(pieces_of(ANSWER, size)), stream=True))
    assert streamed_message(events) == {"reasoning_content": "Two and two make four.", "content": "Four."}
    for event in events:
        for choice in event["choices"]:
            assert "<" not in (choice["delta"].get("content") or "") and "Two" not in (choice["delta"].get("content") or "")
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


async def test_separate_reasoning_false_passes_everything_through():
    body = (await chat(reasoning_manager([piece(ANSWER, [1], STOP)]), separate_reasoning=False)).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    events = sse_events(await chat(reasoning_manager(pieces_of(ANSWER, 4)), stream=True, separate_reasoning=False))
    assert streamed_message(events) == {"reasoning_content": "", "content": ANSWER}
    response = await chat(reasoning_manager([piece(ANSWER, [1], STOP)]), separate_reasoning="no")
    assert response.status_code == 400 and response.json()["error"]["param"] == "separate_reasoning"


async def test_without_a_parser_nothing_is_separated():
    body = (await chat(StandInTokenizerManager([piece(ANSWER, [1], STOP)]))).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}


async def test_calls_are_read_from_the_answer_not_the_reasoning():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    text = f'<think>Maybe <tool_call>\n{{"name": "get_weather", "arguments": {{"city": "Rome"}}}}\n</tool_call>?</think>{call}'
    manager = reasoning_manager([piece(text, [1], STOP)])
    message = (await chat(manager, tools=[WEATHER])).json()["choices"][0]["message"]
    assert message["reasoning_content"].startswith("Maybe <tool_call>")
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [{"city": "Paris"}]
    events = sse_events(await chat(reasoning_manager(pieces_of(text, 5)), tools=[WEATHER], stream=True))
    arguments = "".join(tool["function"].get("arguments", "") for event in events for choice in event["choices"]
                        for tool in choice["delta"].get("tool_calls", []))
    assert json.loads(arguments) == {"city": "Paris"}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_json_schema_or_forced_call_applies_after_the_reasoning():
    manager = reasoning_manager([piece('<think>x</think>{"city": "Paris"}', [1], STOP)])
    schema = {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}
    await chat(manager, response_format=schema)
    params = manager.requests[-1].sampling_params
    assert (params.json_schema, params.reasoning_start, params.reasoning_end) == ('{"type": "object"}', "<think>", "</think>")
    await chat(manager, tools=[WEATHER], tool_choice="required")
    params = manager.requests[-1].sampling_params
    assert params.reasoning_end == "</think>" and '"get_weather"' in params.json_schema
    assert manager.generation_prefixes[-1] == ""  # no call opened before the reasoning
    # A regex describes the whole output, reasoning included: it is left alone.
    await chat(manager, regex="<think>[a-z]+</think>[A-Z][a-z]+")
    assert manager.requests[-1].sampling_params.reasoning_end is None
    await chat(manager, response_format=schema, separate_reasoning=False)
    assert manager.requests[-1].sampling_params.reasoning_end is None


class FramelessParser(ReasoningParser):
    """Reasoning it can split, but not describe to a grammar."""

    def stream(self):
        return TaggedReasoningParser("<think>", "</think>").stream()


async def test_a_parser_without_a_frame_leaves_constraints_on_the_whole_output():
    manager = reasoning_manager([piece('{"city": "Paris"}', [1], STOP)], FramelessParser())
    await chat(manager, tools=[WEATHER], tool_choice="required")
    assert manager.requests[-1].sampling_params.reasoning_end is None
    assert manager.generation_prefixes[-1] == "<tool_call>\n"


class RaisingParser(ReasoningParser):
    def stream(self):
        raise ValueError("broken plugin")


async def test_a_failing_parser_fails_that_request_alone():
    manager = reasoning_manager([piece(ANSWER, [1], STOP)], RaisingParser())
    response = await chat(manager)
    assert response.status_code == 500 and "reasoning parser" in response.json()["error"]["message"]
    assert manager.failures.counts[("reasoning_parser", "think_reasoning_parser")] == 1
