"""Tool calls on a real server with the real default model, through the ``openai`` SDK.

SmolLM2-135M's chat template cannot render tools, so these also run the
fallback: the tools, past calls and results are written into the prompt by
the Hermes parser. A forced call (``required`` or a named function) is the
grammar backend's doing, so its arguments always match the schema; "auto" is
driven by a regular expression that writes a Hermes block, which the parser
must then find, so nothing depends on what a small model chooses to say.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema  # installed with openapi-spec-validator, of the test extra
import openai
import pytest

pytestmark = pytest.mark.real_model

TIMEOUT = 180
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                      "parameters": WEATHER_PARAMETERS}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
                                      "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                                     "required": ["zone"], "additionalProperties": False}}},
]
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
HERMES_CALL = r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris", "unit": "celsius"\}\}\n</tool_call>'


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(None, ["scheduler.max_running_requests=4"])


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def streamed(chunks) -> tuple[str, list[dict], str | None]:
    """A stream's content, its calls joined from their deltas, and its finish reason."""
    content, calls, finish_reason = "", {}, None
    for chunk in chunks:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for part in choice.delta.tool_calls or []:
            if part.id is not None:
                assert part.index not in calls
                calls[part.index] = {"id": part.id, "name": part.function.name, "arguments": ""}
            calls[part.index]["arguments"] += part.function.arguments or ""
        finish_reason = choice.finish_reason or finish_reason
    return content, [calls[index] for index in sorted(calls)], finish_reason


def test_the_whole_loop_call_result_answer(client, model):
    messages = list(QUESTION)
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name in ("get_weather", "get_time")
    arguments = json.loads(call.function.arguments)
    schema = next(tool["function"]["parameters"] for tool in TOOLS if tool["function"]["name"] == call.function.name)
    jsonschema.validate(arguments, schema)

    # The SDK's own message goes back into the history, with the tool's result.
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})})
    second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, temperature=0, max_tokens=40)
    answer = second.choices[0]
    assert answer.finish_reason in ("stop", "length", "tool_calls"), answer
    assert answer.message.content or answer.message.tool_calls
    # The history with the call and its result is in the prompt the model read.
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 20


def test_a_named_function_is_called_and_streams_as_deltas(client, model):
    forced = {"type": "function", "function": {"name": "get_weather"}}
    whole = client.chat.completions.create(
        model=model, messages=QUESTION, tools=TOOLS, tool_choice=forced, temperature=0, max_tokens=80
    )
    [call] = whole.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and whole.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMETERS)

    chunks = client.chat.completions.create(
        model=model, messages=QUESTION, tools=TOOLS, tool_choice=forced, temperature=0, max_tokens=80, stream=True
    )
    content, calls, finish_reason = streamed(chunks)
    assert finish_reason == "tool_calls" and content == ""
    # Greedy decoding: the deltas join up to the very call the whole answer made.
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", call.function.arguments)]


# What pydantic writes for nested models: "$ref"s into a "$defs" table at the parameters' root.
NESTED_PARAMETERS = {
    "$defs": {
        "Unit": {"enum": ["celsius", "fahrenheit"], "type": "string"},
        "Place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                   "unit": {"$ref": "#/$defs/Unit"}},
                  "required": ["city", "unit"], "additionalProperties": False},
    },
    "type": "object",
    "properties": {"place": {"$ref": "#/$defs/Place"}},
    "required": ["place"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("tool_choice", [{"type": "function", "function": {"name": "forecast"}}, "required"])
def test_a_forced_call_resolves_the_parameters_defs(client, model, tool_choice):
    tools = [*TOOLS, {"type": "function", "function": {"name": "forecast", "parameters": NESTED_PARAMETERS}}]
    answer = client.chat.completions.create(
        model=model, messages=QUESTION, tools=tools, tool_choice=tool_choice, temperature=0, max_tokens=80
    )
    [call] = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    parameters = next(tool["function"]["parameters"] for tool in tools if tool["function"]["name"] == call.function.name)
    jsonschema.validate(json.loads(call.function.arguments), parameters)


def test_auto_finds_the_calls_the_model_writes(client, model):
    fields = dict(model=model, messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=60,
                  extra_body={"regex": HERMES_CALL})
    whole = client.chat.completions.create(**fields)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris", "unit": "celsius"})
    content, calls, finish_reason = streamed(client.chat.completions.create(**fields, stream=True))
    assert (content, finish_reason) == ("", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", call.function.arguments)]


def test_none_answers_in_text(client, model):
    fields = dict(model=model, messages=QUESTION, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=60,
                  extra_body={"regex": HERMES_CALL})
    choice = client.chat.completions.create(**fields).choices[0]
    # The same text as above, but nobody looks for calls in it.
    assert choice.message.tool_calls is None and choice.message.content.startswith("<tool_call>")
    assert choice.finish_reason == "stop"


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"tool_choice": {"type": "function", "function": {"name": "get_stock_price"}}}, "tool_choice.function.name"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
        ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"functions": [{"name": "get_weather"}]}, "functions"),
        ({"messages": [*QUESTION, {"role": "tool", "content": "18 C"}]}, "messages[1].tool_call_id"),
    ],
)
def test_bad_tool_requests_get_a_400_naming_the_field(server, fields, param):
    body = {"messages": QUESTION, "tools": TOOLS, "max_tokens": 8, **fields}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_a_schema_that_cannot_compile_fails_alone(server):
    bad_tool = {"type": "function", "function": {"name": "broken", "parameters": {"type": "nonsense"}}}
    bad = {"messages": QUESTION, "tools": [bad_tool], "tool_choice": {"type": "function", "function": {"name": "broken"}},
           "max_tokens": 8}
    good = {"messages": QUESTION, "tools": TOOLS, "tool_choice": "required", "max_tokens": 80, "temperature": 0}

    def post(body):
        return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT)

    with ThreadPoolExecutor(4) as pool:
        refused = list(pool.map(post, [bad, bad]))
        served = list(pool.map(post, [good, good]))
    for response in refused:
        error = response.json()["error"]
        assert response.status_code == 400 and error["param"] == "tools[0].function.parameters", response.text
        assert "nonsense" in error["message"]
    for response in served:
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "tool_calls"
