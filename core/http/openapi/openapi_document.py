"""``GET /openapi.json``: an OpenAPI 3 description of the routes served.

tercet's own paths (health, metrics, the chat page, this document) and the path
items of the plugin routes the server serves (tercet's APIs are such plugins):
a route whose plugin is disabled is not in it. The document is built from the same limits the request parsers enforce (the
schemas, in :mod:`tercet.http.openapi.openapi_schemas`, read the ranges of
:data:`tercet.sampling_params.FIELD_RANGES` and the parsers' own constants),
so a client generator or a fuzzer sees the ranges the server checks. The served document knows the vocabulary size, which bounds token ids
and ``top_k``; ``build_document(max_tokens_limit=...)`` caps the token-count
fields, for fuzzing runs that must stay short.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.openapi import openapi_anthropic, openapi_responses
from tercet.http.openapi.openapi_embedding_schemas import embedding_request, embedding_response
from tercet.http.openapi.openapi_operations import json_content, operation, responses
from tercet.http.openapi.openapi_schemas import (
    DEFAULT_MAX_PROMPTS,
    chat_completion_request,
    completion_request,
    error_schema,
    generate_request,
    model_schema,
    object_schema,
)
from tercet.http.server.plugin_routes import ServedRoute, installed_route_registrations, served_routes

OPENAPI_VERSION = "3.0.3"
SCHEMA_REF = re.compile(r'"#/components/schemas/([^"]+)"')


def build_document(
    max_tokens_limit: int | None = None,
    include_update_weights: bool = True,
    exclude_paths: tuple[str, ...] = (),
    vocab_size: int | None = None,
    max_prompts: int = DEFAULT_MAX_PROMPTS,
    route_paths: Mapping[str, dict] | None = None,
) -> dict:
    """The OpenAPI document; ``max_tokens_limit`` caps the token-count fields (for fuzzing).

    ``route_paths`` are the path items of the plugin routes served (those of every
    installed plugin when not given), beside tercet's own paths. ``vocab_size``
    bounds token ids and top_k as the server does; without it the document gives
    the bounds the parsers use when it is unknown. ``max_prompts`` bounds prompt
    lists (the server's batch limit; the default configuration's when not given).
    Only the schemas the paths refer to are in ``components``.
    """
    if route_paths is None:
        route_paths = installed_route_paths()
    paths = {**_health_paths(), **route_paths, **_page_paths()}
    if not include_update_weights:
        paths.pop("/update_weights_from_disk", None)
    for path in exclude_paths:
        paths.pop(path, None)
    schemas = _schemas(max_tokens_limit, vocab_size, max_prompts)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "tercet",
            "version": "1",
            "description": "tercet's HTTP API; docs/api.md has the details.",
        },
        "paths": paths,
        "components": {
            "schemas": _referenced(schemas, paths),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def route_paths_of(routes: Iterable[ServedRoute]) -> dict[str, dict]:
    """The path items the served routes give (a route without one is served, not described)."""
    return {route.documented_path: dict(route.route.openapi) for route in routes if route.route.openapi is not None}


def installed_route_paths() -> dict[str, dict]:
    return route_paths_of(served_routes(installed_route_registrations(), core_paths=()))


def _referenced(schemas: dict, paths: dict) -> dict:
    """The schemas ``paths`` refer to, and those they refer to in turn."""
    wanted, found = set(SCHEMA_REF.findall(json.dumps(paths))), set()
    while wanted - found:
        name = (wanted - found).pop()
        found.add(name)
        if name in schemas:
            wanted |= set(SCHEMA_REF.findall(json.dumps(schemas[name])))
    return {name: schema for name, schema in schemas.items() if name in found}


def _health_paths() -> dict:
    health = {
        "200": json_content(object_schema({"status": {"type": "string", "enum": ["ok"]}}), "healthy"),
        "503": json_content(
            object_schema({"status": {"type": "string", "enum": ["unhealthy"]}, "reason": {"type": "string"}}),
            "unhealthy",
        ),
    }
    return {
        "/health": {"get": {**operation("health", "Liveness; never needs the API key", health), "security": []}},
        "/health_generate": {
            "get": {
                **operation("healthGenerate", "Liveness proven by a one-token generation; no API key", health),
                "security": [],
            }
        },
    }


def _page_paths() -> dict:
    """What is not JSON in, JSON out: the metrics, the chat page, this document."""
    return {
        "/metrics": {
            "get": operation("metrics", "Prometheus metrics (text exposition format)", responses(
                {"description": "the metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401")),
        },
        "/": {
            "get": {
                **operation("chatPage", "A chat page for people (HTML); never needs the API key",
                             {"200": {"description": "the page", "content": {"text/html": {"schema": {"type": "string"}}}}}),
                "security": [],
            }
        },
        "/favicon.ico": {
            "get": {
                **operation("favicon", "The chat page's icon (SVG); never needs the API key",
                             {"200": {"description": "the icon", "content": {"image/svg+xml": {"schema": {"type": "string"}}}}}),
                "security": [],
            }
        },
        "/openapi.json": {
            "get": operation("openapi", "This document", responses(json_content({"type": "object"}, "the OpenAPI document"), "401"))
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
        "AnthropicError": openapi_anthropic.error_schema(),
        "AnthropicMessageRequest": openapi_anthropic.message_request(max_tokens_limit, vocab_size),
        "AnthropicCountTokensRequest": openapi_anthropic.count_tokens_request(),
        "ResponsesRequest": openapi_responses.responses_request(max_tokens_limit),
    }


async def openapi_document(request: Request, tokenizer_manager) -> Response:
    state = request.app.state
    if getattr(state, "openapi_document", None) is None:  # built once per app: what it serves never changes
        state.openapi_document = build_document(
            vocab_size=getattr(tokenizer_manager, "vocab_size", None),
            max_prompts=getattr(tokenizer_manager, "batch_limit", DEFAULT_MAX_PROMPTS),
            route_paths=route_paths_of(state.served_routes),
        )
    return JSONResponse(state.openapi_document)


ROUTES = [("/openapi.json", openapi_document, ["GET"])]
