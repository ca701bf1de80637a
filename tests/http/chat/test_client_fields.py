"""A refusal names the field of the protocol the client used, never the chat completions field it became."""

from __future__ import annotations

import pytest
from http_stand_in import StandInTokenizerManager, post

from tercet.errors import RequestError
from tercet.http.anthropic import anthropic_request
from tercet.http.chat.client_fields import ClientFields, FieldRule
from tercet.http.responses import responses_request

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "name": "get_weather", "parameters": SCHEMA}


def test_a_rule_renames_a_whole_field_and_what_lies_under_it():
    fields = ClientFields((FieldRule.of(r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
                           FieldRule.of("stop", "stop_sequences")))
    assert fields.client_field("tools[2].function.parameters.properties") == "tools[2].input_schema.properties"
    assert fields.client_field("stop[1]") == "stop_sequences[1]"
    assert fields.client_field("stop_token_ids") == "stop_token_ids"  # "stop" is not the start of another field
    assert fields.client_field("temperature") == "temperature" and fields.client_field(None) is None


def test_a_chat_message_is_named_by_the_field_it_came_from():
    # A system prompt comes first, and one client message may become several chat messages.
    fields = ClientFields((), ("system", "messages[0].content", "messages[1].content[0]"), "messages")
    assert fields.client_field("messages[0]") == "system"
    assert fields.client_field("messages[2].content") == "messages[1].content[0].content"
    assert fields.client_field("messages[9]") == "messages" and fields.client_field("messages") == "messages"


def test_renamed_names_the_clients_field_in_the_param_and_the_message():
    fields = anthropic_request.translate({"max_tokens": 5, "messages": HI}).fields
    error = fields.renamed(RequestError("tools[0].function.parameters is not a schema", "tools[0].function.parameters"))
    assert (error.param, error.message) == ("tools[0].input_schema", "tools[0].input_schema is not a schema")
    untouched = RequestError("temperature must be in [0, 100]", "temperature")
    assert fields.renamed(untouched) is untouched


def test_each_protocols_translation_maps_its_messages():
    anthropic = anthropic_request.translate({"max_tokens": 5, "system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                                     {"type": "text", "text": "and so?"}]}]})
    assert anthropic.fields.message_fields == ("system", "messages[0].content[0]", "messages[0].content")
    responses = responses_request.translate({"instructions": "Be brief.", "input": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}]})
    # Two calls of one turn are one chat message: the first call's.
    assert responses.fields.message_fields == ("instructions", "input[0]", "input[2]")
    assert responses.fields.client_field("messages") == "input"


async def anthropic_refusal(body: dict, path: str = "/v1/messages") -> str:
    response = await post(body, path)
    assert response.status_code == 400, response.text
    return response.json()["error"]["message"]


async def responses_refusal(body: dict, manager: StandInTokenizerManager | None = None) -> tuple[str, str]:
    response = await post(body, "/v1/responses", manager)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    return error["param"], error["message"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("tool, named", [
    ({"name": "a b", "input_schema": SCHEMA}, "tools[0].name must be 1 to 64 letters"),
    ({"name": "f", "input_schema": []}, "tools[0].input_schema must be a JSON Schema object"),
    ({"name": "f", "input_schema": {"description": "\ud800"}}, "tools[0].input_schema is not valid Unicode"),
    ({"name": "f", "input_schema": SCHEMA, "description": 5}, "tools[0].description must be a string"),
])
async def test_messages_name_anthropics_tool_fields(path, tool, named):
    message = await anthropic_refusal({"max_tokens": 5, "messages": HI, "tools": [tool]}, path)
    assert message.startswith(named) and "function" not in message


@pytest.mark.parametrize("body, named", [
    ({"tools": [{"name": "f", "input_schema": SCHEMA}] * 2}, "tools[1].name 'f' is offered twice"),
    ({"tool_choice": {"type": "tool", "name": "f"}}, "tool_choice.name 'f' is not one of the tools"),
    ({"tool_choice": {"type": "any"}}, 'tool_choice {"type": "any"} needs tools'),
    ({"tool_choice": "any"}, 'tool_choice must be {"type": "auto"}, {"type": "any"}'),
    ({"tool_choice": {"type": {}}}, "tool_choice.type must be one of 'auto', 'any', 'none', 'tool', got {}"),
    ({"tool_choice": {"type": ["auto"]}}, "tool_choice.type must be one of"),
    ({"tools": [{"name": "f", "input_schema": SCHEMA}],
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": 1}},
     "tool_choice.disable_parallel_tool_use must be true or false"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]},
     "messages[0].content[0].is_error must be true or false"),
    ({"stop_sequences": ["a", ""]}, "stop_sequences must be a list of at most 16 non-empty strings"),
    ({"thinking": {"type": {}}}, "thinking.type must be one of"),
])
async def test_messages_refuse_in_anthropics_terms(body, named):
    message = await anthropic_refusal({"max_tokens": 5, "messages": HI, **body})
    assert message.startswith(named), message
    assert "function" not in message and "required" not in message


async def test_a_streamed_message_is_refused_the_same_way():
    message = await anthropic_refusal({"max_tokens": 5, "messages": HI, "stream": True, "tool_choice": {"type": []}})
    assert message.startswith("tool_choice.type must be one of")


@pytest.mark.parametrize("body, param, named", [
    ({"text": {"format": {"type": "json_schema", "name": "a b", "schema": SCHEMA}}}, "text.format.name",
     "text.format.name must be 1 to 64 letters"),
    ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema",
     "text.format.schema is required"),
    ({"text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": "yes"}}},
     "text.format.strict", "text.format.strict must be true or false"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice.name",
     "tool_choice.name 'other' is not one of the tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice.name", "tool_choice.name must be"),
    ({"tool_choice": "any"}, "tool_choice", 'tool_choice must be "auto", "none", "required" or {"type": "function", '
                                            '"name": ...}'),
    ({"tool_choice": "required"}, "tool_choice", 'tool_choice "required" needs tools'),
    ({"tools": [{**WEATHER, "name": "a b"}]}, "tools[0].name", "tools[0].name must be 1 to 64 letters"),
    ({"tools": [{**WEATHER, "parameters": "x"}]}, "tools[0].parameters", "tools[0].parameters must be a JSON Schema"),
    ({"previous_response_id": 0}, "previous_response_id", "previous_response_id: this server keeps no responses"),
    ({"background": 0}, "background", "background must be true or false"),
    ({"input": [{"role": {"a": 1}, "content": "x"}]}, "input[0].role", "input[0].role must be one of"),
    ({"input": [{"role": ["user"], "content": "x"}]}, "input[0].role", "input[0].role must be one of"),
    ({"max_output_tokens": -1}, "max_output_tokens", "max_output_tokens must be an integer"),
])
async def test_responses_name_the_responses_fields(body, param, named):
    refused_param, message = await responses_refusal({"input": "x", **body})
    assert refused_param == param and message.startswith(named), message
    assert "function.name" not in message and "json_schema.name" not in message


async def test_a_conversation_too_long_for_the_context_names_the_input():
    # The stand-in's template: four tokens a message, in a context of 64.
    param, message = await responses_refusal({"input": [{"role": "user", "content": "x"}] * 16})
    assert param == "input" and "conversation" in message
