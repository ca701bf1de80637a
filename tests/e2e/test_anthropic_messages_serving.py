"""The Anthropic Messages API through Anthropic's own SDK, unchanged, against a real server (tiny model).

The tiny model's words are noise, so what is checked is what the server decides:
the shapes, the stop reasons, the token counts, a stop sequence cut where the
greedy answer has it, and tool calls forced by the grammar backend (their
arguments always match the schema).
"""

from __future__ import annotations

import anthropic
import httpx
import jsonschema  # installed with openapi-spec-validator, of the test extra
import pytest

GREEDY = {"temperature": 0}  # this SDK's create() takes sampling fields through extra_body
WEATHER = {"name": "get_weather", "description": "The current weather in a city", "input_schema": {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris?"}]


@pytest.fixture(scope="module")
def client(tiny_server):
    return anthropic.Anthropic(base_url=tiny_server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    return tiny_llama_dir.name


def test_a_multi_turn_message_with_a_system_prompt(client, model):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": [{"type": "text", "text": "Tell me more."}]}]
    reply = client.messages.create(model=model, max_tokens=6, system="Be brief.", messages=messages,
                                   metadata={"user_id": "alice"}, extra_body=GREEDY)
    assert (reply.type, reply.role, reply.model) == ("message", "assistant", model)
    assert reply.stop_reason in ("max_tokens", "end_turn") and reply.usage.output_tokens <= 6
    assert [block.type for block in reply.content] in (["text"], [])
    counted = client.messages.count_tokens(model=model, system="Be brief.", messages=messages)
    assert reply.usage.input_tokens == counted.input_tokens > 0


def test_a_stop_sequence_ends_the_answer_where_the_greedy_answer_has_it(client, model):
    whole = client.messages.create(model=model, max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    text = whole.content[0].text
    stop = text[len(text) // 2:][:3]
    assert stop.strip(), text
    cut = client.messages.create(model=model, max_tokens=24, messages=QUESTION, stop_sequences=[stop],
                                 extra_body=GREEDY)
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)
    assert text.startswith(cut.content[0].text if cut.content else "") and stop not in (cut.content or [""])[0].text


def test_the_stream_helpers_see_the_events_the_api_sends(client, model):
    with client.messages.stream(model=model, max_tokens=8, messages=QUESTION, extra_body=GREEDY) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    whole = client.messages.create(model=model, max_tokens=8, messages=QUESTION, extra_body=GREEDY)
    assert streamed_text == "".join(block.text for block in final.content) == "".join(b.text for b in whole.content)
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_the_raw_event_sequence(tiny_server, model):
    body = {"model": model, "max_tokens": 4, "messages": QUESTION, "stream": True, "temperature": 0}
    with httpx.stream("POST", tiny_server.base_url + "/v1/messages", json=body, timeout=120) as response:
        names = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    middle = names[1:-2]
    assert middle[0] == "content_block_start" and middle[-1] == "content_block_stop"
    assert set(middle[1:-1]) == {"content_block_delta"}


@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_a_forced_tool_call_is_a_tool_use_block_whose_input_matches(client, model, tool_choice):
    reply = client.messages.create(model=model, max_tokens=60, messages=QUESTION, tools=[WEATHER],
                                   tool_choice=tool_choice, extra_body=GREEDY)
    (call,) = [block for block in reply.content if block.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and call.name == "get_weather"
    jsonschema.validate(call.input, WEATHER["input_schema"])
    answer = client.messages.create(model=model, max_tokens=6, tools=[WEATHER], extra_body=GREEDY, messages=[
        *QUESTION, {"role": "assistant", "content": reply.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}]},
    ])
    assert answer.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_a_forced_call_streams_as_input_json(client, model):
    with client.messages.stream(model=model, max_tokens=60, messages=QUESTION, tools=[WEATHER],
                                tool_choice={"type": "any"}, extra_body=GREEDY) as stream:
        deltas = [event.delta.partial_json for event in stream
                  if event.type == "content_block_delta" and event.delta.type == "input_json_delta"]
        final = stream.get_final_message()
    (call,) = final.content
    assert call.type == "tool_use" and final.stop_reason == "tool_use" and deltas
    jsonschema.validate(call.input, WEATHER["input_schema"])


def test_tool_choice_none_and_auto_answer_consistently(client, model):
    none = client.messages.create(model=model, max_tokens=6, messages=QUESTION, tools=[WEATHER],
                                  tool_choice={"type": "none"}, extra_body=GREEDY)
    assert [block.type for block in none.content] in (["text"], []) and none.stop_reason != "tool_use"
    auto = client.messages.create(model=model, max_tokens=6, messages=QUESTION, tools=[WEATHER], extra_body=GREEDY)
    has_calls = any(block.type == "tool_use" for block in auto.content)
    assert has_calls == (auto.stop_reason == "tool_use")


@pytest.mark.parametrize("body, status", [
    ({"messages": QUESTION}, 400),  # no max_tokens
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, 400),
    ({"max_tokens": 5, "messages": QUESTION, "top_k": "many"}, 400),
    ({"max_tokens": 10**9, "messages": QUESTION}, 400),
    ({"max_tokens": 5, "messages": QUESTION, "model": "claude-x"}, 404),
])
def test_bad_input_is_refused_in_anthropics_error_shape(tiny_server, body, status):
    response = httpx.post(tiny_server.base_url + "/v1/messages", json=body, timeout=60)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and set(error["error"]) == {"type", "message"}
    assert "Traceback" not in response.text and "File " not in response.text
