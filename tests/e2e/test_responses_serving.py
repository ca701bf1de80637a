"""The OpenAI Responses API through the openai SDK's responses.create and responses.stream, against a
real server (tiny model).

The tiny model's words are noise, so what is checked is what the server decides:
shapes, statuses, token counts, tool calls forced by the grammar backend, and
JSON kept to a schema by it (checked on the answers that completed; the schemas
keep answers short, and the test asserts that some completed).
"""

from __future__ import annotations

import json

import httpx
import jsonschema  # installed with openapi-spec-validator, of the test extra
import openai
import pytest

COLOUR = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
          "required": ["colour"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
    "additionalProperties": False}}
PROMPTS = ["Pick a colour.", "Your favourite colour?", "Name one colour.", "Colour of the sky?"]


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    return tiny_llama_dir.name


def test_a_string_input_with_instructions(client, model):
    reply = client.responses.create(model=model, input="Hello there", instructions="Be brief.", max_output_tokens=6,
                                    temperature=0, store=False)
    assert (reply.object, reply.model, reply.store) == ("response", model, False)
    assert reply.status in ("completed", "incomplete") and reply.usage.output_tokens <= 6
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.usage.input_tokens > 0 and all(item.type == "message" for item in reply.output)


def test_item_input_streams_what_it_answers_whole(client, model):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Tell me more."}]
    whole = client.responses.create(model=model, input=items, max_output_tokens=8, temperature=0)
    with client.responses.stream(model=model, input=items, max_output_tokens=8, temperature=0) as stream:
        deltas = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        streamed = stream.get_final_response() if whole.status == "completed" else None
    assert deltas == whole.output_text
    if streamed is not None:
        assert (streamed.output_text, streamed.usage.output_tokens) == (whole.output_text, whole.usage.output_tokens)


def test_the_raw_events_end_in_the_final_status(tiny_server, model):
    body = {"model": model, "input": "Hi", "max_output_tokens": 3, "stream": True, "temperature": 0}
    with httpx.stream("POST", tiny_server.base_url + "/v1/responses", json=body, timeout=120) as response:
        events = [json.loads(line.removeprefix("data: ")) for line in response.iter_lines() if line.startswith("data: ")]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [event["type"] for event in events[:2]] == ["response.created", "response.in_progress"]
    final = events[-1]
    assert final["type"] == f"response.{final['response']['status']}" and final["response"]["usage"]["output_tokens"]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_weather"}])
def test_a_forced_function_call(client, model, tool_choice):
    reply = client.responses.create(model=model, input="Weather in Paris?", tools=[WEATHER], tool_choice=tool_choice,
                                    max_output_tokens=60, temperature=0)
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert call.name == "get_weather" and reply.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    answer = client.responses.create(model=model, tools=[WEATHER], max_output_tokens=5, temperature=0, input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"},
    ])
    assert answer.status in ("completed", "incomplete")


def test_text_format_json_schema_keeps_the_answer_to_the_schema(client, model):
    text_format = {"format": {"type": "json_schema", "name": "colour", "schema": COLOUR, "strict": True}}
    completed = 0
    for prompt in PROMPTS:
        reply = client.responses.create(model=model, input=prompt, text=text_format, max_output_tokens=40, temperature=0)
        if reply.status == "completed":
            jsonschema.validate(json.loads(reply.output_text), COLOUR)
            completed += 1
    assert completed, "no answer completed within max_output_tokens: nothing was checked"


@pytest.mark.parametrize("body, param", [
    ({"input": "x", "store": True}, "store"),
    ({"input": "x", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]}, "input[0].content[0]"),
    ({"input": "x", "max_output_tokens": 10**9}, "max_output_tokens"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}},
     "text.format"),
])
def test_bad_input_is_a_400_naming_the_field(tiny_server, body, param):
    response = httpx.post(tiny_server.base_url + "/v1/responses", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param)
    assert "Traceback" not in response.text
