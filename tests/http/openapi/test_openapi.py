"""The OpenAPI document: valid, complete, and in step with the request parsers."""

from __future__ import annotations

import copy
import re

import jsonschema_rs
import openapi_spec_validator
import pytest
import schemathesis
from http_stand_in import MODEL, StandInTokenizerManager, client_for

from tercet.config import ServerConfig
from tercet.errors import RequestError
from tercet.field_checks import IntRange
from tercet.http.native.native_request import parse_generate_request
from tercet.http.openai.openai_request import parse_completion_request
from tercet.http.openapi import openapi_document as openapi
from tercet.http.server.app import CORE_ROUTES, create_app
from tercet.http.server.plugin_routes import installed_route_registrations
from tercet.sampling_params import FIELD_RANGES, INT64_MIN, UINT64_MAX

STAND_IN_VOCAB = StandInTokenizerManager.vocab_size
# What every installed plugin's routes and tercet's own paths make.
DOCUMENT = openapi.build_document()
BUILTIN_ROUTE_PLUGINS = {"openai_routes", "native_routes", "control_routes", "anthropic_routes", "responses_routes"}


def test_the_document_is_valid_openapi():
    for document in (DOCUMENT, openapi.build_document(max_tokens_limit=64, include_update_weights=False)):
        schemathesis.openapi.from_dict(document).validate()


def test_an_invalid_document_is_caught():
    # The validity check above has teeth.
    broken = copy.deepcopy(DOCUMENT)
    broken["paths"]["/health"]["get"]["responses"] = "nope"
    with pytest.raises(jsonschema_rs.ValidationError):
        schemathesis.openapi.from_dict(broken).validate()


def test_openapi_spec_validator_agrees():
    # A second, independent validator (in the test extra, so this never skips).
    openapi_spec_validator.validate(DOCUMENT)


def test_every_builtin_route_is_described():
    operations = {
        (path, method.lower()) for path, item in DOCUMENT["paths"].items() for method in item if method != "parameters"
    }
    # tercet's own routes (a contrib plugin's may be installed too, and need describe nothing).
    builtin = [registration.obj for registration in installed_route_registrations()
               if registration.plugin_name in BUILTIN_ROUTE_PLUGINS]
    routes = [route.route for route in CORE_ROUTES] + builtin
    for route in routes:
        # A route's "{model:path}" is the document's "{model}": the converter is starlette's.
        documented_path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        for method in route.methods:
            assert (documented_path, method.lower()) in operations
    expected = {
        ("/generate", "post"),
        ("/v1/completions", "post"),
        ("/v1/chat/completions", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/health", "get"),
        ("/health_generate", "get"),
        ("/flush_cache", "post"),
        ("/get_server_info", "get"),
        ("/abort_request", "post"),
        ("/pause_generation", "post"),
        ("/continue_generation", "post"),
        ("/update_weights_from_disk", "post"),
        ("/start_profile", "post"),
        ("/stop_profile", "post"),
    }
    assert expected <= operations


def test_operation_ids_are_unique():
    ids = [op["operationId"] for item in DOCUMENT["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_fuzzing_variant_caps_tokens_and_drops_paths():
    document = openapi.build_document(max_tokens_limit=64, include_update_weights=False, exclude_paths=("/pause_generation",))
    schemas = document["components"]["schemas"]
    assert schemas["CompletionRequest"]["properties"]["max_tokens"]["maximum"] == 64
    assert schemas["ChatCompletionRequest"]["properties"]["max_completion_tokens"]["maximum"] == 64
    native = schemas["GenerateRequest"]["properties"]["sampling_params"]["properties"]
    assert native["max_new_tokens"]["maximum"] == 64 and native["min_new_tokens"]["maximum"] == 64
    assert "/update_weights_from_disk" not in document["paths"]
    assert "/pause_generation" not in document["paths"]
    uncapped = DOCUMENT["components"]["schemas"]["CompletionRequest"]["properties"]["max_tokens"]
    assert uncapped["maximum"] == FIELD_RANGES["max_new_tokens"].maximum


@pytest.mark.anyio
async def test_served_at_openapi_json():
    app = create_app(StandInTokenizerManager())
    async with client_for(app) as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    # The served document knows the vocabulary, which bounds token ids and top_k.
    assert response.json() == openapi.build_document(vocab_size=STAND_IN_VOCAB) != DOCUMENT


def _as_json_schema(schema):
    """OpenAPI 3.0 spelled as JSON Schema (draft 4), so jsonschema_rs can check a body:
    ``nullable`` becomes a union with null, as schemathesis converts it."""
    if isinstance(schema, list):
        return [_as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: _as_json_schema(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/v1/completions", {"prompt": "Say", "temperature": -1}, 400),
        ("/v1/completions", {"prompt": "Say", "model": "other"}, 404),
        ("/generate", {"text": "Say", "sampling_params": {"bogus": 1}}, 400),
        ("/nowhere", {}, 404),
    ],
)
@pytest.mark.anyio
async def test_error_responses_match_the_error_schema(path, body, status):
    validator = jsonschema_rs.validator_for(_as_json_schema(openapi.error_schema()))
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.post(path, json=body)
    assert response.status_code == status
    validator.validate(response.json())


def _resolved(schema):
    """``schema`` with its ``$ref``s to the document's components replaced by what they name."""
    if isinstance(schema, list):
        return [_resolved(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _resolved(DOCUMENT["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    return {key: _resolved(value) for key, value in schema.items()}


def _response_schema(path: str, status: str) -> dict:
    schema = DOCUMENT["paths"][path]["get"]["responses"][status]["content"]["application/json"]["schema"]
    return _as_json_schema(_resolved(schema))


@pytest.mark.parametrize(
    "url, path, status",
    [
        ("/v1/models", "/v1/models", "200"),
        (f"/v1/models/{MODEL}", "/v1/models/{model}", "200"),
        ("/v1/models/other", "/v1/models/{model}", "404"),
    ],
)
@pytest.mark.anyio
async def test_model_responses_match_the_document(url, path, status):
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.get(url)
    assert str(response.status_code) == status
    jsonschema_rs.validator_for(_response_schema(path, status)).validate(response.json())


# -- the document's ranges are the parsers' ranges ---------------------------------

# The document the stand-in's server serves: ranges bounded by its vocabulary, as the parsers' are.
SERVED = openapi.build_document(vocab_size=STAND_IN_VOCAB)
NATIVE_SAMPLING = SERVED["components"]["schemas"]["GenerateRequest"]["properties"]["sampling_params"]
OPENAI_COMPLETION = SERVED["components"]["schemas"]["CompletionRequest"]
BOUNDED = [
    (name, schema)
    for name, schema in NATIVE_SAMPLING["properties"].items()
    if schema.get("type") in ("integer", "number")
]


def _inside_and_outside(schema):
    """Values at the schema's edges (accepted) and just past them (refused)."""
    step = 1 if schema["type"] == "integer" else 1e-3
    inside, outside = [], []
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum"):
            inside.append(low + step)
            outside.append(low)
        else:
            inside.append(low)
            outside.append(low - step)
    if "maximum" in schema:
        inside.append(schema["maximum"])
        outside.append(schema["maximum"] + step)
    return inside, outside


def _generate(sampling_params: dict, **top_level):
    body = {"text": "Say", "sampling_params": sampling_params, **top_level}
    return parse_generate_request(body, STAND_IN_VOCAB)


def _context_for(name: str, value) -> dict:
    # min_new_tokens may not exceed max_new_tokens.
    return {"max_new_tokens": value} if name == "min_new_tokens" else {}


@pytest.mark.parametrize("name, schema", BOUNDED, ids=[name for name, _ in BOUNDED])
def test_native_sampling_ranges_match_the_parser(name, schema):
    inside, outside = _inside_and_outside(schema)
    for value in inside:
        _generate({name: value, **_context_for(name, value)})
    for value in outside:
        with pytest.raises(RequestError):
            _generate({name: value, **_context_for(name, value)})


@pytest.mark.parametrize("name", ["temperature", "top_p", "top_k", "min_p", "repetition_penalty", "n", "logprobs"])
def test_completion_ranges_match_the_parser(name):
    inside, outside = _inside_and_outside(OPENAI_COMPLETION["properties"][name])
    for value in inside:
        parse_completion_request({"prompt": "Say", name: value}, MODEL, STAND_IN_VOCAB)
    for value in outside:
        with pytest.raises(RequestError):
            parse_completion_request({"prompt": "Say", name: value}, MODEL, STAND_IN_VOCAB)


def test_native_top_level_ranges_match_the_parser():
    properties = SERVED["components"]["schemas"]["GenerateRequest"]["properties"]
    assert properties["logprob_start_len"]["minimum"] == -1
    _generate({}, logprob_start_len=-1)
    with pytest.raises(RequestError):
        _generate({}, logprob_start_len=-2)
    inside, outside = _inside_and_outside(properties["top_logprobs_num"])
    for value in inside:
        _generate({}, top_logprobs_num=value)
    for value in outside:
        with pytest.raises(RequestError):
            _generate({}, top_logprobs_num=value)


def test_unknown_sampling_keys_are_refused_as_documented():
    assert NATIVE_SAMPLING["additionalProperties"] is False
    with pytest.raises(RequestError):
        _generate({"bogus": 1})
    for name in NATIVE_SAMPLING["properties"]:
        # Every documented key is a key the parser knows (null: the default).
        _generate({name: None})


# -- the document and the parsers agree, body by body ------------------------------


def _request_schema(path: str) -> dict:
    schema = SERVED["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = SERVED["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return _as_json_schema(schema)


HI = {"role": "user", "content": "hi"}
RESPONSE_FORMATS = [
    None,
    {"type": "text"},
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": False, "strict": True, "description": "d"}},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": None, "strict": None, "description": None}},
    {"type": "json_schema", "json_schema": {"name": "n"}},
    {"type": "json_object", "json_schema": 1},
    {},
    {"type": "json"},
    {"type": "json_schema"},
    {"type": "json_schema", "json_schema": None},
    {"type": "json_schema", "json_schema": {"schema": {}}},
    {"type": "json_schema", "json_schema": {"name": "a b"}},
    {"type": "json_schema", "json_schema": {"name": "a" * 65}},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": "{}"}},
    {"type": "json_schema", "json_schema": {"name": "n", "strict": 1}},
    {"type": "json_schema", "json_schema": {"name": "n", "description": 1}},
    "json_object",
]

# Bodies on the edge of what the document allows (schemathesis found the first
# disagreements): for each, the schema and the parser must give the same answer.
EDGE_BODIES = [
    ("/abort_request", {}),
    ("/abort_request", {"abort_all": False}),
    ("/abort_request", {"abort_all": None}),
    ("/abort_request", {"abort_all": True}),
    ("/abort_request", {"rid": "0", "abort_all": {}}),
    ("/abort_request", {"rid": "0", "abort_all": None}),
    ("/abort_request", {"rid": None, "abort_all": True}),
    ("/abort_request", {"rid": ""}),
    ("/abort_request", {"rid": 5, "abort_all": True}),
    ("/flush_cache", {}),
    ("/flush_cache", {"timeout": None}),
    ("/flush_cache", {"timeout": 3600}),
    ("/flush_cache", {"timeout": 3600.5}),
    ("/flush_cache", {"timeout": -1}),
    ("/generate", {"text": None, "input_ids": [0]}),
    ("/generate", {"text": "x", "input_ids": None}),
    ("/generate", {"text": None, "input_ids": None}),
    ("/generate", {"text": "x", "input_ids": [0]}),
    ("/generate", {"input_ids": [STAND_IN_VOCAB - 1]}),
    ("/generate", {"input_ids": [STAND_IN_VOCAB]}),
    ("/generate", {"text": "x", "sampling_params": {"top_k": STAND_IN_VOCAB}}),
    ("/generate", {"text": "x", "sampling_params": {"top_k": STAND_IN_VOCAB + 1}}),
    ("/generate", {"text": "x", "sampling_params": {"stop_token_ids": [STAND_IN_VOCAB]}}),
    ("/generate", {"text": "x", "logprob_start_len": FIELD_RANGES["max_new_tokens"].maximum + 1}),
    ("/v1/completions", {"prompt": [STAND_IN_VOCAB - 1]}),
    ("/v1/completions", {"prompt": [[STAND_IN_VOCAB]]}),
    ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"prompt": "x", "stream_options": []}),
    ("/v1/completions", {"prompt": "x", "best_of": 1}),
    ("/v1/completions", {"prompt": "x", "suffix": ""}),
    ("/v1/completions", {"prompt": "x", "suffix": []}),
    ("/v1/completions", {"prompt": ["a", "b"]}),
    ("/v1/completions", {"prompt": ["a", ""]}),  # the stand-in tokenizes nothing, so no empty-prompt check
    ("/v1/completions", {"prompt": [[1], [2, 3]]}),
    ("/v1/completions", {"prompt": []}),
    ("/v1/completions", {"prompt": ["a", [1]]}),
    ("/v1/completions", {"prompt": [[1], 2]}),
    ("/v1/completions", {"prompt": [[1], []]}),
    ("/v1/completions", {"prompt": [[1], [STAND_IN_VOCAB]]}),
    ("/v1/completions", {"prompt": [[[1]]]}),
    ("/generate", {"text": ["a", "b"]}),
    ("/generate", {"text": ["a"], "input_ids": None}),
    ("/generate", {"text": []}),
    ("/generate", {"text": ["a", 1]}),
    ("/generate", {"text": None, "input_ids": [[0], [1, 2]]}),
    ("/generate", {"input_ids": [[0], 1]}),
    ("/generate", {"input_ids": [[0], []]}),
    ("/generate", {"input_ids": [[0], [STAND_IN_VOCAB]]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "assistant"}, {"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "developer", "content": "a"}, {"role": "user", "content": "b"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream_options": {}}),
    *[
        (path, {**body, "response_format": response_format})
        for path, body in (("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {"messages": [HI]}))
        for response_format in RESPONSE_FORMATS
    ],
    ("/v1/completions", {"prompt": "x", "regex": "a+"}),
    ("/v1/completions", {"prompt": "x", "regex": ""}),
    ("/v1/chat/completions", {"messages": [HI], "ebnf": 'root ::= "a"'}),
    ("/v1/chat/completions", {"messages": [HI], "ebnf": 5}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": "{}"}}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": {"type": "string"}}}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": ""}}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": True}}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": ["{}"]}}),
    ("/generate", {"text": "x", "sampling_params": {"regex": "a"}}),
    ("/generate", {"text": "x", "sampling_params": {"regex": ""}}),
    ("/generate", {"text": "x", "sampling_params": {"ebnf": 'root ::= "a"'}}),
    ("/generate", {"text": "x", "sampling_params": {"ebnf": None}}),
    ("/generate", {"text": "x", "sampling_params": {"ebnf": {}}}),
    ("/v1/embeddings", {"input": "x"}),
    ("/v1/embeddings", {"input": ""}),
    ("/v1/embeddings", {"input": []}),
    ("/v1/embeddings", {"input": ["a", "b"]}),
    ("/v1/embeddings", {"input": ["a", ""]}),
    ("/v1/embeddings", {"input": ["a", [1]]}),
    ("/v1/embeddings", {"input": [STAND_IN_VOCAB - 1]}),
    ("/v1/embeddings", {"input": [STAND_IN_VOCAB]}),
    ("/v1/embeddings", {"input": [[1], [2, 3]]}),
    ("/v1/embeddings", {"input": [[1], []]}),
    ("/v1/embeddings", {"input": [[[1]]]}),
    ("/v1/embeddings", {"input": [True]}),
    ("/v1/embeddings", {"input": None}),
    ("/v1/embeddings", {}),
    ("/v1/embeddings", {"input": "x", "encoding_format": "base64", "dimensions": 4, "user": "u", "model": None}),
    ("/v1/embeddings", {"input": "x", "encoding_format": "binary"}),
    ("/v1/embeddings", {"input": "x", "dimensions": 0}),
    ("/v1/embeddings", {"input": "x", "dimensions": 4.0}),
    ("/v1/embeddings", {"input": "x", "dimensions": True}),
    ("/v1/embeddings", {"input": "x", "user": 5}),
]


@pytest.mark.parametrize("path, body", EDGE_BODIES, ids=[f"{path}-{body}" for path, body in EDGE_BODIES])
@pytest.mark.anyio
async def test_the_document_and_the_parsers_agree(path, body):
    in_schema = jsonschema_rs.Draft4Validator(_request_schema(path)).is_valid(body)
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.post(path, json=body)
    assert response.status_code in (200, 400), response.text
    assert (response.status_code == 200) == in_schema, f"schema says {in_schema}, server says {response.text}"


def test_every_integer_is_bounded_within_64_bits():
    """An integer the document allows is one the wire and the scheduler can carry."""

    def integers(schema, where):
        if isinstance(schema, dict):
            if schema.get("type") == "integer":
                yield where, schema
            for key, value in schema.items():
                yield from integers(value, f"{where}.{key}")
        elif isinstance(schema, list):
            for index, value in enumerate(schema):
                yield from integers(value, f"{where}[{index}]")

    found = list(integers(SERVED["paths"], "paths")) + list(integers(SERVED["components"], "components"))
    assert len(found) > 20
    for where, schema in found:
        assert "minimum" in schema and "maximum" in schema, where
        # Only seeds may be unsigned 64-bit; everything else fits int64, the scheduler's tensors.
        limit = UINT64_MAX if where.endswith(".seed") else (1 << 63) - 1
        assert INT64_MIN <= schema["minimum"] <= schema["maximum"] <= limit, where


def test_ranges_come_from_the_parsers_table():
    properties = SERVED["components"]["schemas"]["CompletionRequest"]["properties"]
    assert properties["top_k"]["maximum"] == STAND_IN_VOCAB
    assert properties["stop_token_ids"]["items"]["maximum"] == STAND_IN_VOCAB - 1
    generic = DOCUMENT["components"]["schemas"]["CompletionRequest"]["properties"]
    assert generic["top_k"]["maximum"] == FIELD_RANGES["top_k"].maximum
    for name, value_range in FIELD_RANGES.items():
        if isinstance(value_range, IntRange) and value_range.vocab_offset is None:
            assert NATIVE_SAMPLING["properties"][name]["minimum"] == value_range.minimum, name
            assert NATIVE_SAMPLING["properties"][name]["maximum"] == value_range.maximum, name


@pytest.mark.anyio
async def test_prompt_lists_are_bounded_by_the_servers_batch_limit():
    completion = DOCUMENT["components"]["schemas"]["CompletionRequest"]["properties"]["prompt"]
    assert [branch.get("maxItems") for branch in completion["oneOf"]] == [None, None, 256, 256]
    assert ServerConfig().max_prompts_per_request == 256
    manager = StandInTokenizerManager()
    manager.batch_limit = 3  # the TokenizerManager's: server.max_prompts_per_request, or what the server holds
    async with client_for(create_app(manager)) as client:
        served = (await client.get("/openapi.json")).json()
    schemas = served["components"]["schemas"]
    prompt = schemas["CompletionRequest"]["properties"]["prompt"]
    assert [b.get("maxItems") for b in prompt["oneOf"]] == [None, None, 3, 3]
    native = schemas["GenerateRequest"]["properties"]
    assert [b.get("maxItems") for b in native["text"]["oneOf"]] == [None, 3]
    assert [b.get("maxItems") for b in native["input_ids"]["oneOf"]] == [None, 3]
