"""``GET /openapi.json``: an OpenAPI 3 description of the built-in routes.

The document is built from the same limits the request parsers enforce (the
ranges of :data:`tercet.sampling_params.FIELD_RANGES` and the parsers' own
constants), so a client generator or a fuzzer sees the ranges the server
checks. The served document knows the vocabulary size, which bounds token ids
and ``top_k``; ``build_document(max_tokens_limit=...)`` caps the token-count
fields, for fuzzing runs that must stay short.
"""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.chat_messages import CHAT_ROLES
from tercet.http.control_api import TIMEOUT_RANGE
from tercet.http.native_request import LOGPROB_START_LEN
from tercet.http.openai_request import UNSUPPORTED_CHAT_FIELDS
from tercet.http.scheduling_fields import MAX_TENANT_LENGTH, PRIORITY
from tercet.sampling_params import FIELD_RANGES, MAX_STOP_STRINGS, TOKEN_ID, IntRange, NumberRange

OPENAPI_VERSION = "3.0.3"
ERROR_REF = {"$ref": "#/components/schemas/Error"}
# Fields whose maximum build_document(max_tokens_limit=...) lowers.
TOKEN_COUNT_FIELDS = ("max_new_tokens", "min_new_tokens")


# -- schema helpers -------------------------------------------------------------


def _ranged(
    value_range: IntRange | NumberRange, vocab_size: int | None = None, cap: int | None = None, **extra
) -> dict:
    """The schema of a parser's range; ``cap`` lowers its maximum."""
    if isinstance(value_range, IntRange):
        schema = {"type": "integer", "minimum": value_range.minimum, "maximum": value_range.maximum_for(vocab_size)}
    else:
        schema = {"type": "number", "minimum": value_range.minimum, "maximum": value_range.maximum}
        if value_range.exclusive_minimum:
            schema["exclusiveMinimum"] = True  # OpenAPI 3.0 spelling: a flag on minimum
    if cap is not None:
        schema["maximum"] = min(schema["maximum"], cap)
    return {**schema, **extra}


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


def _token_ids(vocab_size: int | None, min_items: int = 0) -> dict:
    token_id = _ranged(TOKEN_ID, vocab_size, description="a token id, below the vocabulary size")
    schema = {"type": "array", "items": token_id}
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
        "additionalProperties": _ranged(FIELD_RANGES["logit_bias"]),
    }


def _sampling_fields(max_tokens_limit: int | None, vocab_size: int | None) -> dict:
    """The fields shared by every route, by their ``/generate`` names (tercet's own)."""

    def ranged(name: str, **extra) -> dict:
        cap = max_tokens_limit if name in TOKEN_COUNT_FIELDS else None
        return _ranged(FIELD_RANGES[name], vocab_size, cap, **extra)

    return {
        "max_new_tokens": ranged("max_new_tokens"),
        "min_new_tokens": ranged("min_new_tokens", description="at most max tokens"),
        "temperature": ranged("temperature", description="0: greedy"),
        "top_p": ranged("top_p"),
        "top_k": ranged("top_k", description="-1 or 0: no top-k filtering; at most the vocabulary size"),
        "min_p": ranged("min_p"),
        "frequency_penalty": ranged("frequency_penalty"),
        "presence_penalty": ranged("presence_penalty"),
        "repetition_penalty": ranged("repetition_penalty"),
        "seed": ranged("seed"),
        "stop": _stop(),
        "stop_token_ids": _token_ids(vocab_size),
        "ignore_eos": {"type": "boolean"},
        "skip_special_tokens": {"type": "boolean"},
        "no_stop_trim": {"type": "boolean"},
        "logit_bias": _logit_bias(),
        "n": ranged("n"),
    }


# The OpenAI routes' names for the sampling fields whose names differ.
OPENAI_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}


def _openai_sampling_fields(max_tokens_limit: int | None, vocab_size: int | None) -> dict:
    fields = _sampling_fields(max_tokens_limit, vocab_size)
    return {OPENAI_NAMES.get(name, name): _nullable(schema) for name, schema in fields.items()}


def _scheduling_fields() -> dict:
    return {
        "priority": _nullable(_ranged(PRIORITY, description="for the priority scheduling policy")),
        "user": _nullable({"type": "string", "maxLength": MAX_TENANT_LENGTH, "description": "the tenant"}),
    }


def _stream_fields() -> dict:
    return {
        "stream": _nullable({"type": "boolean"}),
        "stream_options": _nullable(
            _object(
                {"include_usage": _nullable({"type": "boolean"})},
                description="ignored unless stream is true",
            )
        ),
    }


def _top_logprobs() -> dict:
    return _ranged(FIELD_RANGES["top_logprobs_num"])


# -- request bodies -----------------------------------------------------------------


def generate_request(max_tokens_limit: int | None = None, vocab_size: int | None = None) -> dict:
    sampling = {name: _nullable(schema) for name, schema in _sampling_fields(max_tokens_limit, vocab_size).items()}
    sampling.update({
        "return_logprob": _nullable({"type": "boolean"}),
        "top_logprobs_num": _nullable(_top_logprobs()),
        "return_prompt_logprob": _nullable({"type": "boolean"}),
    })
    text = {"type": "string", "description": "the prompt; exactly one of text and input_ids is not null"}
    input_ids = _token_ids(vocab_size, min_items=1)
    properties = {
        "text": _nullable(text),
        "input_ids": _nullable(input_ids),
        "sampling_params": _nullable(_object(sampling, additional=False)),
        "stream": _nullable({"type": "boolean"}),
        "rid": _nullable({"type": "string", "minLength": 1, "description": "must not be in use"}),
        "return_logprob": _nullable({"type": "boolean"}),
        "top_logprobs_num": _nullable(_top_logprobs()),
        "return_prompt_logprob": _nullable({"type": "boolean"}),
        "logprob_start_len": _nullable(_ranged(LOGPROB_START_LEN)),
        "return_text_in_logprobs": _nullable({"type": "boolean"}),
        **_scheduling_fields(),
    }
    # Exactly one of them not null: each branch holds one, non-nullable.
    one_of = [_object({"text": text}, required=("text",)), _object({"input_ids": input_ids}, required=("input_ids",))]
    return _object(properties, oneOf=one_of)


def completion_request(max_tokens_limit: int | None = None, vocab_size: int | None = None) -> dict:
    token_ids = _token_ids(vocab_size, min_items=1)
    prompt = {
        "oneOf": [
            {"type": "string"},
            token_ids,
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"oneOf": [{"type": "string"}, token_ids]}},
        ]
    }
    properties = {
        "prompt": prompt,
        "model": _nullable({"type": "string", "description": "must be the served model's name"}),
        **_openai_sampling_fields(max_tokens_limit, vocab_size),
        "logprobs": _nullable(_top_logprobs()),
        "echo": _nullable({"type": "boolean"}),
        "best_of": _nullable(_ranged(FIELD_RANGES["n"], description="only equal to n")),
        "suffix": _nullable({"type": "string", "maxLength": 0, "description": "not supported"}),
        **_stream_fields(),
        **_scheduling_fields(),
    }
    return _object(properties, required=("prompt",))


def _chat_message() -> dict:
    text_part = _object(
        {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}, required=("type", "text")
    )
    content = {"oneOf": [{"type": "string"}, {"type": "array", "items": text_part}]}
    # As OpenAI: only an assistant turn (one that called tools, there) may have no content.
    other_roles = [role for role in (*CHAT_ROLES, "developer") if role != "assistant"]
    speaking = _object(
        {"role": {"type": "string", "enum": other_roles}, "content": content}, required=("role", "content")
    )
    assistant = _object(
        {"role": {"type": "string", "enum": ["assistant"]}, "content": _nullable(content)}, required=("role",)
    )
    return {"oneOf": [speaking, assistant], "description": "content may be left out or null only on an assistant turn"}


def chat_completion_request(max_tokens_limit: int | None = None, vocab_size: int | None = None) -> dict:
    sampling = _openai_sampling_fields(max_tokens_limit, vocab_size)
    properties = {
        "messages": {"type": "array", "minItems": 1, "items": _chat_message()},
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
    timeout = _object({"timeout": _nullable(_ranged(TIMEOUT_RANGE, description="seconds to wait for idle"))})
    rid = {"type": "string", "minLength": 1}
    abort = _object(
        {"rid": _nullable(rid), "abort_all": _nullable({"type": "boolean"})},
        # A rid, or abort_all set to true: each branch holds one, non-nullable.
        anyOf=[
            _object({"rid": rid}, required=("rid",)),
            _object({"abort_all": {"type": "boolean", "enum": [True]}}, required=("abort_all",)),
        ],
    )
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
                "timeout": _nullable(_ranged(TIMEOUT_RANGE)),
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
    vocab_size: int | None = None,
) -> dict:
    """The OpenAPI document; ``max_tokens_limit`` caps the token-count fields (for fuzzing).

    ``vocab_size`` bounds token ids and top_k as the server does; without it the
    document gives the bounds the parsers use when it is unknown.
    """
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
                "GenerateRequest": generate_request(max_tokens_limit, vocab_size),
                "CompletionRequest": completion_request(max_tokens_limit, vocab_size),
                "ChatCompletionRequest": chat_completion_request(max_tokens_limit, vocab_size),
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


DOCUMENT = build_document()


@functools.lru_cache(maxsize=4)
def _served_document(vocab_size: int | None) -> dict:
    return build_document(vocab_size=vocab_size)


async def openapi_document(request: Request, tokenizer_manager) -> Response:
    return JSONResponse(_served_document(getattr(tokenizer_manager, "vocab_size", None)))


ROUTES = [("/openapi.json", openapi_document, ["GET"])]
