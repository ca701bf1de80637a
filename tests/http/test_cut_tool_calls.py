"""A forced tool call cut by max_tokens, at every point, on every chat route: each API's own shape.

The grammar keeps a forced call to the object ``{"name": ..., "arguments": {...}}``:
the server's own wording, never the model's answer. Cut anywhere, no part of it
reaches the text. Before its name is whole there is no call (an empty answer cut
by the length limit); after, the call: chat completions' ``tool_calls`` with the
arguments written so far, the Responses API's ``function_call`` item
``incomplete``, and Anthropic's ``tool_use`` block whose ``input`` holds the
members written whole, as Anthropic's SDK reads them from the stream's
``input_json_delta``s.
"""

from __future__ import annotations

import json

import jiter
import pytest
from http_stand_in import StandInTokenizerManager, piece, post, sse_events

from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio
CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
ARGUMENTS_START, ARGUMENTS_END = CALL.index('{"city"'), len(CALL) - 1
# The first cut at which the name is whole.
NAME_WHOLE = CALL.index('"get_weather"') + len('"get_weather"')
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
HI = [{"role": "user", "content": "Weather?"}]
BODIES = {
    "/v1/chat/completions": {"messages": HI, "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": SCHEMA}}], "tool_choice": "required", "max_tokens": 30},
    "/v1/messages": {"messages": HI, "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
                     "tool_choice": {"type": "any"}, "max_tokens": 30},
    "/v1/responses": {"input": "Weather?", "tools": [{"type": "function", "name": "get_weather", "parameters": SCHEMA}],
                      "tool_choice": "required", "max_output_tokens": 30},
}


def cut_script(cut: int, stream: bool) -> list:
    """The call written up to ``cut`` characters, then the length limit: in one piece, or in two when streamed."""
    text, length = CALL[:cut], FinishReason("length")
    if not stream:
        return [piece(text, [1], length, completion_tokens=cut)]
    half = cut // 2
    return [piece(text[:half], [1], completion_tokens=1), piece(text[half:], [1], length, completion_tokens=cut)]


def written_arguments(cut: int) -> str:
    return CALL[ARGUMENTS_START:min(cut, ARGUMENTS_END)] if cut > ARGUMENTS_START else ""


def anthropic_events(response) -> list[tuple[str, dict]]:
    blocks = [block for block in response.text.split("\n\n") if block]
    return [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1].removeprefix("data: ")))
            for block in blocks]


def chat_answer(response, stream: bool) -> tuple[str, list[tuple[str, str]], str]:
    """``(text, [(name, arguments)], finish reason)`` of a chat completion."""
    if not stream:
        (choice,) = response.json()["choices"]
        calls = [(call["function"]["name"], call["function"]["arguments"])
                 for call in choice["message"].get("tool_calls") or ()]
        return choice["message"]["content"] or "", calls, choice["finish_reason"]
    text, calls, finish = "", [], None
    for chunk in sse_events(response):
        for choice in chunk["choices"]:
            text += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or ():
                if "id" in call:
                    calls.append([call["function"]["name"], ""])
                calls[-1][1] += call["function"].get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return text, [tuple(call) for call in calls], finish


def messages_answer(response, stream: bool) -> tuple[str, list[tuple[str, dict, str]], str]:
    """``(text, [(name, input, streamed input JSON)], stop reason)`` of an Anthropic message."""
    if not stream:
        message = response.json()
        text = "".join(block["text"] for block in message["content"] if block["type"] == "text")
        calls = [(block["name"], block["input"], None) for block in message["content"] if block["type"] == "tool_use"]
        return text, calls, message["stop_reason"]
    text, calls, reason = "", [], None
    for name, event in anthropic_events(response):
        if name == "content_block_start" and event["content_block"]["type"] == "tool_use":
            calls.append([event["content_block"]["name"], event["content_block"]["input"], ""])
        elif name == "content_block_delta":
            delta = event["delta"]
            text += delta.get("text", "")
            if delta["type"] == "input_json_delta":
                calls[-1][2] += delta["partial_json"]
        elif name == "message_delta":
            reason = event["delta"]["stop_reason"]
    return text, [tuple(call) for call in calls], reason


def responses_answer(response, stream: bool) -> dict:
    if not stream:
        return response.json()
    blocks = [block for block in response.text.split("\n\n") if block]
    events = [json.loads(block.split("\n")[1].removeprefix("data: ")) for block in blocks]
    assert not any(event["type"] == "response.output_text.delta" for event in events)
    return events[-1]["response"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_cut_forced_call_on_chat_completions(stream):
    for cut in range(len(CALL) + 1):
        manager = StandInTokenizerManager(cut_script(cut, stream))
        response = await post({**BODIES["/v1/chat/completions"], "stream": stream}, "/v1/chat/completions", manager)
        text, calls, finish = chat_answer(response, stream)
        assert (text, finish) == ("", "length"), cut
        assert calls == ([("get_weather", written_arguments(cut))] if cut >= NAME_WHOLE else []), cut


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_cut_forced_call_on_anthropic_messages(stream):
    for cut in range(len(CALL) + 1):
        manager = StandInTokenizerManager(cut_script(cut, stream))
        response = await post({**BODIES["/v1/messages"], "stream": stream}, "/v1/messages", manager)
        text, calls, reason = messages_answer(response, stream)
        assert (text, reason) == ("", "max_tokens"), cut
        if cut < NAME_WHOLE:
            assert calls == [], cut
            continue
        ((name, tool_input, streamed),) = calls
        arguments = written_arguments(cut)
        # What Anthropic's SDK makes of the arguments streamed so far (jiter, in its partial mode).
        sdk_input = jiter.from_json(arguments.encode(), partial_mode=True) if arguments else {}
        assert name == "get_weather", cut
        if stream:
            assert (tool_input, streamed) == ({}, arguments), cut
        else:
            assert tool_input == sdk_input, cut


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_cut_forced_call_on_the_responses_api(stream):
    for cut in range(len(CALL) + 1):
        manager = StandInTokenizerManager(cut_script(cut, stream))
        response = await post({**BODIES["/v1/responses"], "stream": stream}, "/v1/responses", manager)
        answer = responses_answer(response, stream)
        assert (answer["status"], answer["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
        items = [(item["type"], item.get("name"), item.get("arguments"), item["status"]) for item in answer["output"]]
        expected = [("function_call", "get_weather", written_arguments(cut), "incomplete")] if cut >= NAME_WHOLE else []
        assert items == expected, cut


async def test_a_call_cut_inside_a_string_has_the_members_written_whole():
    cut = CALL.index("Paris") + 2  # '{"city": "Pa'
    manager = StandInTokenizerManager(cut_script(cut, False))
    message = (await post(BODIES["/v1/messages"], "/v1/messages", manager)).json()
    assert [block["input"] for block in message["content"]] == [{}]
    cut = CALL.index(', "days"') + 9  # '{"city": "Paris", "days": '
    manager = StandInTokenizerManager(cut_script(cut, False))
    message = (await post(BODIES["/v1/messages"], "/v1/messages", manager)).json()
    assert [block["input"] for block in message["content"]] == [{"city": "Paris"}]
