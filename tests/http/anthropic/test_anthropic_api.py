"""/v1/messages and /v1/messages/count_tokens through Anthropic's own SDK, on the stand-in manager."""

import anthropic
import httpx2
import pytest
from http_stand_in import MODEL, StandInTokenizerManager, piece

from tercet.http.server.app import create_app
from tercet.ipc.messages import FinishReason
from tercet.reasoning.reader import ReasoningReader
from tercet.reasoning.tags import TaggedReasoningParser

pytestmark = pytest.mark.anyio
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"name": "get_weather", "description": "The weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HI = [{"role": "user", "content": "Say hi"}]


def client_for(manager: StandInTokenizerManager, **app_options) -> anthropic.AsyncAnthropic:
    # The SDK brings its own HTTP client library (httpx2), with its own in-process transport.
    transport = httpx2.ASGITransport(app=create_app(manager, **app_options))
    http_client = httpx2.AsyncClient(transport=transport, base_url="http://localhost")
    return anthropic.AsyncAnthropic(api_key="k", base_url="http://localhost", http_client=http_client, max_retries=0)


async def test_a_message_with_a_system_prompt_and_sampling_fields():
    manager = StandInTokenizerManager()
    reply = await client_for(manager).messages.create(
        model=MODEL, max_tokens=7, system=[{"type": "text", "text": "Be brief."}], messages=HI,
        metadata={"user_id": "alice"},
        # This SDK's create() has no sampling arguments; a client sends them in the body.
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 5},
    )
    assert [block.type for block in reply.content] == ["text"] and reply.content[0].text == "Hello"
    assert (reply.role, reply.model, reply.stop_reason, reply.stop_sequence) == ("assistant", MODEL, "max_tokens", None)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 3)
    assert manager.templated[-1] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    (request,) = manager.requests
    params = request.sampling_params
    assert (params.max_new_tokens, params.temperature, params.top_p, params.top_k) == (7, 0.5, 0.9, 5)
    assert request.tenant == "alice"


async def test_a_stop_sequence_is_named_as_the_stop_reason():
    stopped = [piece("Hel", [5, 6], FinishReason("stop", matched_text="lo"), completion_tokens=2)]
    reply = await client_for(StandInTokenizerManager(stopped)).messages.create(
        model=MODEL, max_tokens=9, stop_sequences=["lo"], messages=HI)
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "lo")


async def test_a_multi_turn_conversation_with_a_tool_use_and_its_result():
    manager = StandInTokenizerManager()
    await client_for(manager).messages.create(model=MODEL, max_tokens=5, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                     {"type": "text", "text": "Thanks; and so?"}]},
    ])
    # The stand-in's template cannot render tools: the calls and results are written as the Hermes parser does.
    conversation = "\n".join(f"{message['role']}: {message['content']}" for message in manager.templated[-1])
    assert conversation.endswith('assistant: Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
                                 '{"city": "Paris"}}\n</tool_call>\nuser: <tool_response>\nsunny\n</tool_response>\n'
                                 'user: Thanks; and so?')


async def test_a_call_in_the_answer_is_a_tool_use_block():
    manager = StandInTokenizerManager([piece("Sure. " + CALL_TEXT, [1], FinishReason("stop", matched_token=2))])
    reply = await client_for(manager).messages.create(model=MODEL, max_tokens=50, tools=[WEATHER], messages=HI)
    assert [block.type for block in reply.content] == ["text", "tool_use"]
    assert (reply.content[1].name, reply.content[1].input) == ("get_weather", {"city": "Paris"})
    assert reply.stop_reason == "tool_use"


async def test_the_stream_has_the_events_the_sdk_expects():
    async with client_for(StandInTokenizerManager()).messages.stream(model=MODEL, max_tokens=9, messages=HI) as stream:
        types = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_start") == 1 and types.count("content_block_stop") == 1
    assert final.content[0].text == "Hello" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3


async def test_a_streamed_call_arrives_as_input_json_deltas():
    pieces = [piece("Sure. <tool_call>\n{\"name\": \"get_weather\", ", [1]),
              piece('"arguments": {"city": "Paris"}}\n</tool_call>', [2], FinishReason("stop", matched_token=2))]
    client = client_for(StandInTokenizerManager(pieces))
    async with client.messages.stream(model=MODEL, max_tokens=50, tools=[WEATHER], messages=HI) as stream:
        deltas = [event.delta.type async for event in stream if event.type == "content_block_delta"]
        final = await stream.get_final_message()
    assert "input_json_delta" in deltas
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"


@pytest.mark.parametrize("choice, chat_choice", [
    ({"type": "any"}, "required"),
    ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ({"type": "none"}, "none"),
    ({"type": "auto"}, "auto"),
])
def test_tool_choice_is_chat_completions_own(choice, chat_choice):
    from tercet.http.anthropic.anthropic_request import chat_body

    body = chat_body({"max_tokens": 5, "messages": HI, "tools": [WEATHER], "tool_choice": choice})
    assert body["tool_choice"] == chat_choice
    assert body["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]


async def test_the_sdks_api_key_header_is_taken():
    manager = StandInTokenizerManager()
    assert (await client_for(manager, api_key="k").messages.create(model=MODEL, max_tokens=5, messages=HI)).content
    wrong = client_for(manager, api_key="other")
    with pytest.raises(anthropic.AuthenticationError):
        await wrong.with_options(api_key="not-it").messages.create(model=MODEL, max_tokens=5, messages=HI)


async def test_count_tokens_counts_the_templated_prompt():
    count = await client_for(StandInTokenizerManager()).messages.count_tokens(model=MODEL, system="x", messages=HI)
    assert count.input_tokens == 8  # the stand-in's template: four tokens a message


@pytest.mark.parametrize("body, named", [
    ({"messages": HI}, "max_tokens is required"),
    ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "content blocks of type 'image' are not supported"),
    ({"max_tokens": 5, "messages": HI, "stop_sequences": "END"}, "stop_sequences must be a list"),
    ({"max_tokens": 5, "messages": HI, "temperature": -1}, "temperature"),
    ({"max_tokens": 5, "messages": HI, "metadata": {"user_id": 7}}, "metadata.user_id must be a string"),
    ({"max_tokens": 5, "messages": HI, "tool_choice": {"type": "sometimes"}}, "tool_choice.type must be one of"),
    ({"max_tokens": 5, "messages": HI, "tools": [{"name": "x"}]}, "tools[0].input_schema"),
    ({"max_tokens": 5, "messages": HI, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "reasoning parser"),
    ({"max_tokens": 5, "messages": HI, "model": "claude-other"}, "does not exist"),
])
async def test_bad_input_is_a_400_in_anthropics_shape(body, named):
    client = client_for(StandInTokenizerManager())
    with pytest.raises(anthropic.APIStatusError) as refused:
        await client.post("/v1/messages", cast_to=object, body=body)
    error = refused.value
    assert error.status_code == (404 if "does not exist" in named else 400)
    assert error.body["type"] == "error" and named in error.body["error"]["message"]
    assert error.body["error"]["type"] in ("invalid_request_error", "not_found_error")


async def test_with_a_reasoning_parser_the_reasoning_comes_as_a_thinking_block():
    manager = StandInTokenizerManager([piece("<think>Two and two.</think>\n\nFour.", [1], FinishReason("stop"))])
    manager.reasoning = ReasoningReader(TaggedReasoningParser("<think>", "</think>"), "think_reasoning_parser",
                                        manager.failures)
    reply = await client_for(manager).messages.create(
        model=MODEL, max_tokens=9, messages=HI, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [block.type for block in reply.content] == ["thinking", "text"]
    assert (reply.content[0].thinking, reply.content[1].text) == ("Two and two.", "Four.")
    # Not asked for: the reasoning is still kept out of the text, and not shown.
    manager.script = [piece("<think>Two and two.</think>\n\nFour.", [1], FinishReason("stop"))]
    quiet = await client_for(manager).messages.create(model=MODEL, max_tokens=9, messages=HI)
    assert [(block.type, block.text) for block in quiet.content] == [("text", "Four.")]


async def test_errors_before_the_handler_are_in_anthropics_shape_too():
    with pytest.raises(anthropic.InternalServerError) as crashed:
        await client_for(StandInTokenizerManager([RuntimeError("a secret detail")])).messages.create(
            model=MODEL, max_tokens=5, messages=HI)
    assert crashed.value.body["error"]["type"] == "api_error" and "secret" not in str(crashed.value.body)
    with pytest.raises(anthropic.InternalServerError):
        await client_for(StandInTokenizerManager(healthy=False)).messages.create(model=MODEL, max_tokens=5, messages=HI)
