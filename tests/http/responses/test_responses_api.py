"""/v1/responses through the openai SDK's responses.create and responses.stream, on the stand-in manager."""

import json

import openai
import pytest
from http_stand_in import MODEL, StandInTokenizerManager, client_for, piece

from tercet.http.responses.responses_request import chat_body
from tercet.http.server.app import create_app
from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio
STOP = FinishReason("stop", matched_token=2)
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def sdk(manager: StandInTokenizerManager) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="k", base_url="http://localhost/v1", http_client=client_for(create_app(manager)),
                              max_retries=0)


async def test_a_string_input_with_instructions():
    manager = StandInTokenizerManager([piece("Hello", [5, 6, 7], STOP, completion_tokens=3)])
    reply = await sdk(manager).responses.create(model=MODEL, input="Say hi", instructions="Be brief.", store=False,
                                                max_output_tokens=9, temperature=0.5, top_p=0.9)
    assert (reply.output_text, reply.status, reply.store, reply.model) == ("Hello", "completed", False, MODEL)
    assert [item.type for item in reply.output] == ["message"] and reply.output[0].content[0].type == "output_text"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (3, 3, 6)
    assert manager.templated[-1] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    params = manager.requests[0].sampling_params
    assert (params.max_new_tokens, params.temperature, params.top_p) == (9, 0.5, 0.9)


async def test_an_answer_cut_by_max_output_tokens_is_incomplete():
    reply = await sdk(StandInTokenizerManager()).responses.create(model=MODEL, input="x", max_output_tokens=3)
    assert (reply.status, reply.incomplete_details.reason) == ("incomplete", "max_output_tokens")


async def test_items_in_carry_calls_and_their_outputs():
    manager = StandInTokenizerManager()
    await sdk(manager).responses.create(model=MODEL, tools=[WEATHER], max_output_tokens=5, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ])
    conversation = "\n".join(f"{message['role']}: {message['content']}" for message in manager.templated[-1])
    assert conversation.endswith('user: Weather?\nassistant: <tool_call>\n{"name": "get_weather", "arguments": '
                                 '{"city": "Paris"}}\n</tool_call>\nuser: <tool_response>\nsunny\n</tool_response>')


async def test_a_call_in_the_answer_is_a_function_call_item():
    manager = StandInTokenizerManager([piece(CALL_TEXT, [1], STOP)])
    reply = await sdk(manager).responses.create(model=MODEL, input="Weather?", tools=[WEATHER])
    (call,) = reply.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "get_weather", {"city": "Paris"})
    assert call.call_id and call.id.startswith("fc_")


async def test_the_stream_helpers_accumulate_the_events():
    pieces = [piece("Sure. <tool_call>\n{\"name\": \"get_weather\", ", [1]),
              piece('"arguments": {"city": "Paris"}}\n</tool_call>', [2], STOP)]
    async with sdk(StandInTokenizerManager(pieces)).responses.stream(model=MODEL, input="x", tools=[WEATHER]) as stream:
        types = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert "response.output_text.delta" in types and "response.function_call_arguments.delta" in types
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output_text == "Sure." and json.loads(final.output[1].arguments) == {"city": "Paris"}


def test_text_format_json_schema_is_chat_completions_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = chat_body({"input": "x", "text": {"format": {"type": "json_schema", "name": "thing", "schema": schema}}})
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema,
                                                                          "strict": False}}
    assert body["messages"] == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("body, param", [
    ({"input": "x", "store": True}, "store"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "background": True}, "background"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "file_search_call"}]}, "input[0].type"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "max_output_tokens": -1}, "max_output_tokens"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "x", "tool_choice": {"type": "mcp"}}, "tool_choice"),
])
async def test_bad_input_is_a_400_in_openais_shape_naming_the_field(body, param):
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk(StandInTokenizerManager()).post("/responses", cast_to=object, body=body)
    error = refused.value.body
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error


async def test_the_last_item_of_an_incomplete_answer_is_incomplete_streamed_or_not():
    whole = await sdk(StandInTokenizerManager()).responses.create(model=MODEL, input="x", max_output_tokens=3)
    assert [item.status for item in whole.output] == ["incomplete"]
    async with sdk(StandInTokenizerManager([piece("Hel", [5, 6], FinishReason("length"), completion_tokens=2)])
                   ).responses.stream(model=MODEL, input="x", max_output_tokens=2) as stream:
        done = [event.item.status async for event in stream if event.type == "response.output_item.done"]
    assert done == ["incomplete"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_response_repeats_only_what_a_response_object_allows(stream):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = {"model": MODEL, "input": "x", "metadata": {"team": "search", "run": "7"}, "reasoning": {"effort": "high"},
            "text": {"format": {"type": "json_schema", "name": "thing", "schema": schema}, "verbosity": "low"},
            "tools": [WEATHER], "tool_choice": "none"}
    if stream:
        async with sdk(StandInTokenizerManager()).responses.stream(**body) as events:
            reply = await events.get_final_response()
    else:
        reply = await sdk(StandInTokenizerManager()).responses.create(**body)
    assert reply.metadata == {"team": "search", "run": "7"}
    assert (reply.reasoning.effort, reply.reasoning.summary) == ("high", None)
    text_format = reply.text.format.model_dump(exclude_none=True, by_alias=True)
    assert text_format == {"type": "json_schema", "name": "thing", "schema": schema, "strict": False}
    assert reply.text.verbosity == "low"
    assert reply.tool_choice == "none" and [tool.name for tool in reply.tools] == ["get_weather"]
    named = await sdk(StandInTokenizerManager()).responses.create(
        model=MODEL, input="x", tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"})
    assert (named.tool_choice.type, named.tool_choice.name) == ("function", "get_weather")


async def test_a_forced_call_and_a_text_format_are_refused_in_the_responses_terms():
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk(StandInTokenizerManager()).post("/responses", cast_to=object, body={
            "input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_object"}}})
    assert refused.value.body["param"] == "tool_choice" and "text.format" in refused.value.body["message"]
    assert "response_format" not in refused.value.body["message"]


async def test_a_null_format_is_plain_text_and_no_reasoning_is_null():
    reply = await sdk(StandInTokenizerManager()).responses.create(input="x", text={"format": None})
    assert reply.text.format.type == "text" and reply.reasoning is None and reply.metadata == {}


@pytest.mark.parametrize("metadata, param", [
    ("x", "metadata"),
    ([1], "metadata"),
    ({f"k{index}": "v" for index in range(17)}, "metadata"),
    ({"k" * 65: "v"}, "metadata"),
    ({"k": 1}, "metadata.k"),
    ({"k": "v" * 513}, "metadata.k"),
])
async def test_metadata_is_at_most_sixteen_pairs_of_strings(metadata, param):
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk(StandInTokenizerManager()).post("/responses", cast_to=object,
                                                  body={"input": "x", "metadata": metadata})
    assert refused.value.body["param"] == param


@pytest.mark.parametrize("reasoning, param", [
    ("high", "reasoning"), ({"effort": "extreme"}, "reasoning.effort"), ({"summary": 1}, "reasoning.summary"),
])
async def test_reasoning_is_checked_before_it_is_repeated(reasoning, param):
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk(StandInTokenizerManager()).post("/responses", cast_to=object, body={"input": "x",
                                                                                       "reasoning": reasoning})
    assert refused.value.body["param"] == param
