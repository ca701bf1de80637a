"""``GET /openapi.json``: an OpenAPI 3 description of the built-in routes.

The document is built from the same limits the request parsers enforce
(:mod:`tercet.sampling_params`, :mod:`tercet.http.openai_request`,
:mod:`tercet.http.native_request`), so a client generator or a fuzzer sees the
ranges the server checks. ``build_document(max_tokens_limit=...)`` caps the
token-count fields, for fuzzing runs that must stay short.
"""

from __future__ import annotations

import copy

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from tercet.http.chat_messages import CHAT_ROLES
from tercet.http.openai_request import UNSUPPORTED_CHAT_FIELDS
from tercet.http.scheduling_fields import MAX_TENANT_LENGTH
from tercet.sampling_params import MAX_N, MAX_STOP_STRINGS, MAX_TOP_LOGPROBS

OPENAPI_VERSION = "3.0.3"
ERROR_REF = {"$ref": "#/components/schemas/Error"}
INT64_MIN = -(1 << 63)
UINT64_MAX = (1 << 64) - 1
INT32_BOUND = (1 << 31) - 1


# -- schema helpers -------------------------------------------------------------


def _integer(minimum: int | None = None, maximum: int | None = None, **extra) -> dict:
    schema = {"type": "integer", **extra}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _number(minimum: float, maximum: float, exclusive_minimum: bool = False, **extra) -> dict:
    schema = {"type": "number", "minimum": minimum, "maximum": maximum, **extra}
    if exclusive_minimum:
        schema["exclusiveMinimum"] = True  # OpenAPI 3.0 spelling: a flag on minimum
    return schema


def _nullable(schema: dict) -> dict:
    # A JSON null means "the default" on every optional field.
    return {**schema, "nullable": True}


def _object(properties: dict, required: tuple[str, ...] = (), additional: bool = True, **extra) -> dict:
    schema = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    if not additional:
        schema["additionalProperties"] = False
    return schema


def _token_ids(min_items: int = 0) -> dict:
    schema = {"type": "array", "items": _integer(0, description="a token id, below the vocabulary size")}
    if min_items:
        schema["minItems"] = min_items
    return schema


# -- the sampling parameters (docs/api.md "Sampling parameters") ---------------


def _stop() -> dict:
    text = {"type": "string", "minLength": 1}
    return {"oneOf": [text, {"type": "array", "items": text, "maxItems": MAX_STOP_STRINGS}]}


def _logit_bias() -> dict:
    return {
        "type": "object",
        "description": "token id (a string of digits) -> bias added to its logit",
        "additionalProperties": _number(-100.0, 100.0),
    }


def _sampling_fields(max_tokens_limit: int | None) -> dict:
    """The fields shared by every route, by their ``/generate`` names (tercet's own)."""
    return {
        "max_new_tokens": _integer(0, max_tokens_limit),
        "min_new_tokens": _integer(0, max_tokens_limit, description="at most max tokens"),
        "temperature": _number(0.0, 100.0, description="0: greedy"),
        "top_p": _number(0.0, 1.0, exclusive_minimum=True),
        "top_k": _integer(-1, description="-1 or 0: no top-k filtering"),
        "min_p": _number(0.0, 1.0),
        "frequency_penalty": _number(-2.0, 2.0),
        "presence_penalty": _number(-2.0, 2.0),
        "repetition_penalty": _number(0.0, 10.0, exclusive_minimum=True),
        "seed": _integer(INT64_MIN, UINT64_MAX),
        "stop": _stop(),
        "stop_token_ids": _token_ids(),
        "ignore_eos": {"type": "boolean"},
        "skip_special_tokens": {"type": "boolean"},
        "no_stop_trim": {"type": "boolean"},
        "logit_bias": _logit_bias(),
        "n": _integer(1, MAX_N),
    }


# The OpenAI routes' names for the sampling fields whose names differ.
OPENAI_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}


def _openai_sampling_fields(max_tokens_limit: int | None) -> dict:
    fields = _sampling_fields(max_tokens_limit)
    return {OPENAI_NAMES.get(name, name): _nullable(schema) for name, schema in fields.items()}


def _scheduling_fields() -> dict:
    return {
        "priority": _nullable(_integer(-INT32_BOUND, INT32_BOUND, description="for the priority scheduling policy")),
        "user": _nullable({"type": "string", "maxLength": MAX_TENANT_LENGTH, "description": "the tenant"}),
    }


def _stream_fields() -> dict:
    return {
        "stream": _nullable({"type": "boolean"}),
        "stream_options": _nullable(
            _object(
                {"include_usage": _nullable({"type": "boolean"})},
                description="only allowed when stream is true",
            )
        ),
    }


def _top_logprobs() -> dict:
    return _integer(0, MAX_TOP_LOGPROBS)


# -- request bodies -----------------------------------------------------------------


def generate_request(max_tokens_limit: int | None = None) -> dict:
    sampling = {name: _nullable(schema) for name, schema in _sampling_fields(max_tokens_limit).items()}
    sampling.update({
        "return_logprob": _nullable({"type": "boolean"}),
        "top_logprobs_num": _nullable(_top_logprobs()),
        "return_prompt_logprob": _nullable({"type": "boolean"}),
    })
    properties = {
        "text": {"type": "string", "description": "the prompt; exactly one of text and input_ids"},
        "input_ids": _token_ids(min_items=1),
        "sampling_params": _nullable(_object(sampling, additional=False)),
        "stream": _nullable({"type": "boolean"}),
        "rid": _nullable({"type": "string", "minLength": 1, "description": "must not be in use"}),
        "return_logprob": _nullable({"type": "boolean"}),
        "top_logprobs_num": _nullable(_top_logprobs()),
        "return_prompt_logprob": _nullable({"type": "boolean"}),
        "logprob_start_len": _nullable(_integer(-1)),
        "return_text_in_logprobs": _nullable({"type": "boolean"}),
        **_scheduling_fields(),
    }
    one_of = [_object({}, required=("text",)), _object({}, required=("input_ids",))]
    return _object(properties, oneOf=one_of)


def completion_request(max_tokens_limit: int | None = None) -> dict:
    prompt = {
        "oneOf": [
            {"type": "string"},
            _token_ids(min_items=1),
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"oneOf": [{"type": "string"}, _token_ids(1)]}},
        ]
    }
    properties = {
        "prompt": prompt,
        "model": _nullable({"type": "string", "description": "must be the served model's name"}),
        **_openai_sampling_fields(max_tokens_limit),
        "logprobs": _nullable(_top_logprobs()),
        "echo": _nullable({"type": "boolean"}),
        "best_of": _nullable(_integer(description="only equal to n")),
        "suffix": _nullable({"type": "string", "maxLength": 0, "description": "not supported"}),
        **_stream_fields(),
        **_scheduling_fields(),
    }
    return _object(properties, required=("prompt",))


def chat_completion_request(max_tokens_limit: int | None = None) -> dict:
    text_part = _object(
        {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}, required=("type", "text")
    )
    content = {"oneOf": [{"type": "string"}, {"type": "array", "items": text_part}]}
    message = _object(
        {"role": {"type": "string", "enum": [*CHAT_ROLES, "developer"]}, "content": _nullable(content)},
        required=("role",),
        description="content may be left out only on an assistant turn",
    )
    sampling = _openai_sampling_fields(max_tokens_limit)
    properties = {
        "messages": {"type": "array", "minItems": 1, "items": message},
        "model": _nullable({"type": "string", "description": "must be the served model's name"}),
        **sampling,
        "max_completion_tokens": sampling["max_tokens"],
        "logprobs": _nullable({"type": "boolean"}),
        "top_logprobs": _nullable({**_top_logprobs(), "description": "needs logprobs: true"}),
        **_stream_fields(),
        **_scheduling_fields(),
    }
    for name, reason in UNSUPPORTED_CHAT_FIELDS.items():
        if name not in properties:
            properties[name] = {"description": f"not supported: {reason}", "nullable": True}
    return _object(properties, required=("messages",))


# -- responses ------------------------------------------------------------------


def error_schema() -> dict:
    detail = _object(
        {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": "string", "nullable": True},
            "code": {"type": "string", "nullable": True},
        },
        required=("message", "type", "param", "code"),
    )
    return _object({"error": detail}, required=("error",))


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _responses(ok: dict, *errors: str) -> dict:
    responses = {"200": ok}
    for status in errors:
        responses[status] = _json(ERROR_REF, ERROR_DESCRIPTIONS[status])
    return responses


ERROR_DESCRIPTIONS = {
    "400": "invalid body or field, or a feature tercet lacks",
    "401": "missing or wrong API key",
    "404": "unknown model",
    "409": "conflicts with the server's state",
    "413": "the request body is over server.max_request_body_bytes",
    "429": "the server is at capacity",
    "500": "an unexpected failure",
    "503": "the server cannot serve now",
}
GENERATION_ERRORS = ("400", "401", "404", "413", "429", "500", "503")


def _generation_ok(description: str) -> dict:
    return {
        "description": description,
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},  # with stream: true
        },
    }


def _body(schema: dict, required: bool = True) -> dict:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _operation(operation_id: str, summary: str, responses: dict, body: dict | None = None) -> dict:
    operation = {"operationId": operation_id, "summary": summary, "responses": responses}
    if body is not None:
        operation["requestBody"] = body
    return operation


def _control_paths(include_update_weights: bool) -> dict:
    ok = _json({"type": "object"}, "done")
    timeout = _object({"timeout": _number(0.0, 3600.0, description="seconds to wait for idle")})
    abort = _object({
        "rid": {"type": "string", "minLength": 1},
        "abort_all": {"type": "boolean"},
    })
    paths = {
        "/flush_cache": {
            "post": _operation(
                "flushCache", "Flush the prefix cache", _responses(ok, "400", "401", "409", "413"), _body(timeout, False)
            )
        },
        "/get_server_info": {"get": _operation("getServerInfo", "Configuration and rank states", _responses(ok, "401"))},
        "/abort_request": {
            "post": _operation("abortRequest", "Abort one request or all", _responses(ok, "400", "401", "413"), _body(abort))
        },
        "/pause_generation": {"post": _operation("pauseGeneration", "Pause the schedulers", _responses(ok, "401"))},
        "/continue_generation": {
            "post": _operation("continueGeneration", "Resume the schedulers", _responses(ok, "401"))
        },
    }
    if include_update_weights:
        update = _object(
            {
                "model_path": {"type": "string", "minLength": 1, "description": "a checkpoint directory on the server"},
                "timeout": _number(0.0, 3600.0),
            },
            required=("model_path",),
        )
        paths["/update_weights_from_disk"] = {
            "post": _operation(
                "updateWeightsFromDisk", "Load new weights", _responses(ok, "400", "401", "413"), _body(update)
            )
        }
    return paths


def build_document(
    max_tokens_limit: int | None = None,
    include_update_weights: bool = True,
    exclude_paths: tuple[str, ...] = (),
) -> dict:
    """The OpenAPI document; ``max_tokens_limit`` caps the token-count fields (for fuzzing)."""
    health = {
        "200": _json(_object({"status": {"type": "string", "enum": ["ok"]}}), "healthy"),
        "503": _json(
            _object({"status": {"type": "string", "enum": ["unhealthy"]}, "reason": {"type": "string"}}),
            "unhealthy",
        ),
    }
    models = _object({
        "object": {"type": "string", "enum": ["list"]},
        "data": {"type": "array", "items": _object({"id": {"type": "string"}, "object": {"type": "string"}})},
    })
    paths = {
        "/generate": {
            "post": _operation(
                "generate",
                "SGLang-style native generation",
                _responses(_generation_ok("the generation"), *GENERATION_ERRORS),
                _body({"$ref": "#/components/schemas/GenerateRequest"}),
            )
        },
        "/v1/completions": {
            "post": _operation(
                "createCompletion",
                "OpenAI-compatible text completion",
                _responses(_generation_ok("the completion"), *GENERATION_ERRORS),
                _body({"$ref": "#/components/schemas/CompletionRequest"}),
            )
        },
        "/v1/chat/completions": {
            "post": _operation(
                "createChatCompletion",
                "OpenAI-compatible chat completion",
                _responses(_generation_ok("the chat completion"), *GENERATION_ERRORS),
                _body({"$ref": "#/components/schemas/ChatCompletionRequest"}),
            )
        },
        "/v1/models": {"get": _operation("listModels", "The served model", _responses(_json(models, "the model"), "401"))},
        "/health": {"get": {**_operation("health", "Liveness; never needs the API key", health), "security": []}},
        "/health_generate": {
            "get": {
                **_operation("healthGenerate", "Liveness proven by a one-token generation; no API key", health),
                "security": [],
            }
        },
        **_control_paths(include_update_weights),
        "/openapi.json": {
            "get": _operation("openapi", "This document", _responses(_json({"type": "object"}, "the OpenAPI document"), "401"))
        },
    }
    for path in exclude_paths:
        paths.pop(path, None)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "tercet",
            "version": "1",
            "description": "tercet's HTTP API; docs/api.md has the details.",
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": error_schema(),
                "GenerateRequest": generate_request(max_tokens_limit),
                "CompletionRequest": completion_request(max_tokens_limit),
                "ChatCompletionRequest": chat_completion_request(max_tokens_limit),
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


DOCUMENT = build_document()


async def openapi_document(request: Request, tokenizer_manager) -> Response:
    return JSONResponse(copy.deepcopy(DOCUMENT))


ROUTES = [("/openapi.json", openapi_document, ["GET"])]
