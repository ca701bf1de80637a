"""Structured-output fields -> SamplingParams.json_schema / regex / ebnf, on every route."""

from __future__ import annotations

import asyncio
import json

import pytest

from tercet.errors import RequestError
from tercet.http.native.native_request import parse_generate_request
from tercet.http.openai.openai_request import parse_chat_completion_request, parse_completion_request
from tercet.http.structured_output import ANY_JSON_OBJECT

MODEL = "served-model"
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


async def fake_chat_template(messages: list[dict], max_new_tokens: int, tools=None, generation_prefix="") -> list[int]:
    return [7] * (10 * len(messages))


def completion_params(**body):
    request = parse_completion_request({"model": MODEL, "prompt": "x", **body}, MODEL, 1000)
    return request.generate_request.sampling_params


def chat_params(**body):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    request = asyncio.run(parse_chat_completion_request(body, MODEL, 100, fake_chat_template, 1000))
    return request.generate_request.sampling_params


def native_params(**sampling_params):
    return parse_generate_request({"text": "x", "sampling_params": sampling_params}, 1000).sampling_params


OPENAI_ROUTES = [pytest.param(completion_params, id="completions"), pytest.param(chat_params, id="chat")]


def refused(parse, **body) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(**body)
    assert info.value.status_code == 400
    return info.value


def json_schema_format(**json_schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", **json_schema}}


# -- response_format on the OpenAI routes ---------------------------------------


@pytest.mark.parametrize("params", OPENAI_ROUTES)
@pytest.mark.parametrize(
    "response_format, json_schema",
    [
        (None, None),
        ({"type": "text"}, None),
        ({"type": "json_object"}, '{"type": "object"}'),
        (json_schema_format(schema=SCHEMA), json.dumps(SCHEMA)),
        (json_schema_format(schema=SCHEMA, strict=True, description="a person"), json.dumps(SCHEMA)),
        (json_schema_format(schema=SCHEMA, strict=False, description=None), json.dumps(SCHEMA)),
        (json_schema_format(schema={"enum": ["café", "thé"]}), '{"enum": ["café", "thé"]}'),
        (json_schema_format(schema=True), "true"),
        (json_schema_format(schema={}), "{}"),
        (json_schema_format(), ANY_JSON_OBJECT),  # no schema: any JSON object
        (json_schema_format(schema=None, strict=None), ANY_JSON_OBJECT),
        ({"type": "json_object", "json_schema": 5}, ANY_JSON_OBJECT),  # only json_schema's fields are read for it
        ({"type": "json_schema", "json_schema": {"name": "A-z_09" * 10 + "abcd", "schema": {}}}, "{}"),  # 64 characters
    ],
)
def test_response_format_becomes_the_json_schema(params, response_format, json_schema):
    sampling = params(response_format=response_format)
    assert (sampling.json_schema, sampling.regex, sampling.ebnf) == (json_schema, None, None)


def test_any_json_object_is_the_schema_of_an_object():
    assert json.loads(ANY_JSON_OBJECT) == {"type": "object"}


@pytest.mark.parametrize("params", OPENAI_ROUTES)
@pytest.mark.parametrize(
    "response_format, param, says",
    [
        ("json_object", "response_format", "must be an object"),
        ([{"type": "json_object"}], "response_format", "must be an object"),
        ({}, "response_format.type", "must be one of"),
        ({"type": "json"}, "response_format.type", "'json'"),
        ({"type": "structural_tag"}, "response_format.type", "must be one of"),
        ({"type": None}, "response_format.type", "must be one of"),
        ({"type": "json_schema"}, "response_format.json_schema", "is required"),
        ({"type": "json_schema", "json_schema": None}, "response_format.json_schema", "is required"),
        ({"type": "json_schema", "json_schema": "{}"}, "response_format.json_schema", "must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, "response_format.json_schema.name", "required"),
        (json_schema_format(name=None), "response_format.json_schema.name", "required"),
        (json_schema_format(name=""), "response_format.json_schema.name", "1 to 64"),
        (json_schema_format(name="a b"), "response_format.json_schema.name", "'a b'"),
        (json_schema_format(name="a" * 65), "response_format.json_schema.name", "1 to 64"),
        (json_schema_format(name="name\n"), "response_format.json_schema.name", "1 to 64"),
        (json_schema_format(name="naïve"), "response_format.json_schema.name", "1 to 64"),
        (json_schema_format(name=7), "response_format.json_schema.name", "1 to 64"),
        (json_schema_format(schema=json.dumps(SCHEMA)), "response_format.json_schema.schema", "an object or a boolean"),
        (json_schema_format(schema=[SCHEMA]), "response_format.json_schema.schema", "an object or a boolean"),
        (json_schema_format(schema=0), "response_format.json_schema.schema", "an object or a boolean"),
        (json_schema_format(schema={"enum": ["\ud800"]}), "response_format.json_schema.schema", "lone surrogate"),
        (json_schema_format(strict="yes"), "response_format.json_schema.strict", "true or false"),
        (json_schema_format(description=["a"]), "response_format.json_schema.description", "a string"),
    ],
)
def test_bad_response_formats_name_the_field(params, response_format, param, says):
    error = refused(params, response_format=response_format)
    assert error.param == param and says in error.message, error.message


# -- SGLang's regex and ebnf on the OpenAI routes --------------------------------


@pytest.mark.parametrize("params", OPENAI_ROUTES)
def test_regex_and_ebnf_are_taken_as_sglang_does(params):
    assert params(regex=r"\d{3}-\d{4}").regex == r"\d{3}-\d{4}"
    assert params(ebnf='root ::= "yes" | "no"').ebnf == 'root ::= "yes" | "no"'
    assert params(regex=None, ebnf=None, response_format={"type": "text"}).constraint is None


@pytest.mark.parametrize("params", OPENAI_ROUTES)
@pytest.mark.parametrize(
    "body, param",
    [
        ({"regex": ""}, "regex"),
        ({"regex": 5}, "regex"),
        ({"ebnf": ["root ::= x"]}, "ebnf"),
        ({"ebnf": "\udfff"}, "ebnf"),
        ({"regex": "a", "ebnf": "root ::= x"}, "ebnf"),
        ({"response_format": {"type": "json_object"}, "regex": "a"}, "regex"),
        ({"response_format": {"type": "json_object"}, "min_tokens": 1}, "min_tokens"),
    ],
)
def test_bad_or_several_constraints_are_refused(params, body, param):
    assert refused(params, **body).param == param


def test_plain_text_with_a_regex_is_one_constraint():
    assert chat_params(response_format={"type": "text"}, regex="a+").constraint == ("regex", "a+")


def test_tools_without_a_tool_call_parser_are_refused():
    # Parsing alone (no server's ChatTools) cannot serve tools: a 400, never an answer that ignores them.
    error = refused(chat_params, tools=[{"type": "function", "function": {"name": "f"}}], response_format=None)
    assert error.param == "tools" and "not available" in error.message


# -- /generate's sampling_params -------------------------------------------------


@pytest.mark.parametrize(
    "sampling_params, constraint",
    [
        ({"json_schema": '{"type": "string"}'}, ("json_schema", '{"type": "string"}')),
        ({"json_schema": ' {"type":"string"} '}, ("json_schema", ' {"type":"string"} ')),  # SGLang's text, as sent
        ({"json_schema": "true"}, ("json_schema", "true")),
        ({"json_schema": SCHEMA}, ("json_schema", json.dumps(SCHEMA))),
        ({"json_schema": {}}, ("json_schema", "{}")),
        ({"regex": r"\d{3}-\d{4}"}, ("regex", r"\d{3}-\d{4}")),
        ({"ebnf": 'root ::= "a"'}, ("ebnf", 'root ::= "a"')),
        ({"json_schema": None, "regex": None, "ebnf": None}, None),
        ({}, None),
    ],
)
def test_native_constraints(sampling_params, constraint):
    assert native_params(**sampling_params).constraint == constraint


@pytest.mark.parametrize(
    "sampling_params, says",
    [
        ({"json_schema": ""}, "non-empty"),
        ({"json_schema": 5}, "non-empty string"),
        ({"json_schema": True}, "non-empty string"),  # as text, "true" is taken
        ({"json_schema": [SCHEMA]}, "non-empty string"),
        ({"json_schema": "{'type': 'object'}"}, "not valid JSON"),
        ({"json_schema": '"object"'}, "an object or a boolean"),
        ({"json_schema": "[]"}, "an object or a boolean"),
        ({"json_schema": '{"maximum": NaN}'}, "NaN"),
        ({"json_schema": "[" * 100_000}, "json_schema"),
        ({"json_schema": '{"enum": ["\\ud800"]}'}, "lone surrogate"),
        ({"json_schema": {"enum": ["\ud800"]}}, "lone surrogate"),
        ({"json_schema": "\ud800"}, "lone surrogate"),
    ],
)
def test_bad_native_json_schemas_name_the_field(sampling_params, says):
    error = refused(native_params, **sampling_params)
    assert error.param == "sampling_params.json_schema" and says in error.message, error.message


@pytest.mark.parametrize(
    "sampling_params, param",
    [
        ({"regex": ""}, "sampling_params.regex"),
        ({"regex": ["a"]}, "sampling_params.regex"),
        ({"ebnf": ""}, "sampling_params.ebnf"),
        ({"ebnf": 1}, "sampling_params.ebnf"),
        ({"json_schema": "{}", "regex": "a"}, "sampling_params.regex"),
        ({"regex": "a", "ebnf": "root ::= x"}, "sampling_params.ebnf"),
        ({"json_schema": "{}", "min_new_tokens": 1}, "sampling_params.min_new_tokens"),
    ],
)
def test_bad_or_several_native_constraints_are_refused(sampling_params, param):
    error = refused(native_params, **sampling_params)
    assert error.param == param, error.message
    # /generate's errors speak its own names.
    assert "response_format" not in error.message and "min_tokens" not in error.message.replace("min_new_tokens", "")
