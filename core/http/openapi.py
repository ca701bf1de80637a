"""``GET /openapi.json``: an OpenAPI 3 description of the built-in routes.

The document is built from the same limits the request parsers enforce (the
schemas, in :mod:`tercet.http.openapi_schemas`, read the ranges of
:data:`tercet.sampling_params.FIELD_RANGES` and the parsers' own constants),
so a client generator or a fuzzer sees the ranges the server checks. The served document knows the vocabulary size, which bounds token ids
and ``top_k``; ``build_document(max_tokens_limit=...)`` caps the token-count
fields, for fuzzing runs that must stay short.
"""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.control_api import TIMEOUT_RANGE
from tercet.http.openapi_embedding_schemas import embedding_request, embedding_response
from tercet.http.openapi_schemas import (
    DEFAULT_MAX_PROMPTS,
    ERROR_REF,
    chat_completion_request,
    completion_request,
    error_schema,
    generate_request,
    model_schema,
    nullable,
    object_schema,
    ranged,
)

OPENAPI_VERSION = "3.0.3"


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _responses(ok: dict, *errors: str) -> dict:
    responses = {"200": ok}
    for status in ("403", *errors):  # any route refuses other sites' pages (tercet.http.browser_guard)
        responses[status] = _json(ERROR_REF, ERROR_DESCRIPTIONS[status])
    return responses


ERROR_DESCRIPTIONS = {
    "400": "invalid body or field, or a feature tercet lacks",
    "401": "missing or wrong API key",
    "403": "another site's page (Origin), or a name that is not the server's (Host): server.allowed_origins, "
           "server.allowed_hosts",
    "404": "unknown model",
    "409": "conflicts with the server's state",
    "413": "the request body is over server.max_request_body_bytes",
    "415": "a body not sent as Content-Type: application/json",
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
        responses["415"] = _json(ERROR_REF, ERROR_DESCRIPTIONS["415"])
    return operation


def _control_paths(include_update_weights: bool) -> dict:
    ok = _json({"type": "object"}, "done")
    timeout = object_schema({"timeout": nullable(ranged(TIMEOUT_RANGE, description="seconds to wait for idle"))})
    rid = {"type": "string", "minLength": 1}
    abort = object_schema(
        {"rid": nullable(rid), "abort_all": nullable({"type": "boolean"})},
        # A rid, or abort_all set to true: each branch holds one, non-nullable.
        anyOf=[
            object_schema({"rid": rid}, required=("rid",)),
            object_schema({"abort_all": {"type": "boolean", "enum": [True]}}, required=("abort_all",)),
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
        update = object_schema(
            {
                "model_path": {"type": "string", "minLength": 1, "description": "a checkpoint directory on the server"},
                "timeout": nullable(ranged(TIMEOUT_RANGE)),
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
    max_prompts: int = DEFAULT_MAX_PROMPTS,
) -> dict:
    """The OpenAPI document; ``max_tokens_limit`` caps the token-count fields (for fuzzing).

    ``vocab_size`` bounds token ids and top_k as the server does; without it the
    document gives the bounds the parsers use when it is unknown. ``max_prompts``
    bounds prompt lists (the server's batch limit; the default configuration's
    when not given).
    """
    paths = {
        **_generation_paths(),
        **_model_paths(),
        **_health_paths(),
        **_control_paths(include_update_weights),
        **_page_paths(),
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
            "schemas": _schemas(max_tokens_limit, vocab_size, max_prompts),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def _generation_paths() -> dict:
    return {
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
        "/v1/embeddings": {
            "post": _operation(
                "createEmbedding",
                "OpenAI-compatible embeddings (a model that pools: an encoder, or a decoder with [model] pooling)",
                _responses(_json({"$ref": "#/components/schemas/EmbeddingResponse"}, "the embeddings"),
                           *GENERATION_ERRORS),
                _body({"$ref": "#/components/schemas/EmbeddingRequest"}),
            )
        },
    }


def _model_paths() -> dict:
    model_ref = {"$ref": "#/components/schemas/Model"}
    models = object_schema(
        {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": model_ref}},
        required=("object", "data"),
    )
    # ``minLength``: an empty id would be the path "/v1/models/", a different route.
    model_id = {"name": "model", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    return {
        "/v1/models": {"get": _operation("listModels", "The served model", _responses(_json(models, "the model"), "401"))},
        "/v1/models/{model}": {
            "get": {
                **_operation(
                    "retrieveModel", "The served model, by its id", _responses(_json(model_ref, "the model"), "401", "404")
                ),
                "parameters": [model_id],
            }
        },
    }


def _health_paths() -> dict:
    health = {
        "200": _json(object_schema({"status": {"type": "string", "enum": ["ok"]}}), "healthy"),
        "503": _json(
            object_schema({"status": {"type": "string", "enum": ["unhealthy"]}, "reason": {"type": "string"}}),
            "unhealthy",
        ),
    }
    return {
        "/health": {"get": {**_operation("health", "Liveness; never needs the API key", health), "security": []}},
        "/health_generate": {
            "get": {
                **_operation("healthGenerate", "Liveness proven by a one-token generation; no API key", health),
                "security": [],
            }
        },
    }


def _page_paths() -> dict:
    """What is not JSON in, JSON out: the metrics, the chat page, this document."""
    return {
        "/metrics": {
            "get": _operation("metrics", "Prometheus metrics (text exposition format)", _responses(
                {"description": "the metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401")),
        },
        "/": {
            "get": {
                **_operation("chatPage", "A chat page for people (HTML); never needs the API key",
                             {"200": {"description": "the page", "content": {"text/html": {"schema": {"type": "string"}}}}}),
                "security": [],
            }
        },
        "/favicon.ico": {
            "get": {
                **_operation("favicon", "The chat page's icon (SVG); never needs the API key",
                             {"200": {"description": "the icon", "content": {"image/svg+xml": {"schema": {"type": "string"}}}}}),
                "security": [],
            }
        },
        "/openapi.json": {
            "get": _operation("openapi", "This document", _responses(_json({"type": "object"}, "the OpenAPI document"), "401"))
        },
    }


def _schemas(max_tokens_limit: int | None, vocab_size: int | None, max_prompts: int) -> dict:
    return {
        "Error": error_schema(),
        "Model": model_schema(),
        "GenerateRequest": generate_request(max_tokens_limit, vocab_size, max_prompts),
        "CompletionRequest": completion_request(max_tokens_limit, vocab_size, max_prompts),
        "ChatCompletionRequest": chat_completion_request(max_tokens_limit, vocab_size),
        "EmbeddingRequest": embedding_request(vocab_size, max_prompts),
        "EmbeddingResponse": embedding_response(),
    }


DOCUMENT = build_document()


@functools.lru_cache(maxsize=4)
def _served_document(vocab_size: int | None, max_prompts: int) -> dict:
    return build_document(vocab_size=vocab_size, max_prompts=max_prompts)


async def openapi_document(request: Request, tokenizer_manager) -> Response:
    max_prompts = getattr(tokenizer_manager, "batch_limit", DEFAULT_MAX_PROMPTS)
    return JSONResponse(_served_document(getattr(tokenizer_manager, "vocab_size", None), max_prompts))


ROUTES = [("/openapi.json", openapi_document, ["GET"])]
