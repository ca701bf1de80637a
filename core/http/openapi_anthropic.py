"""The OpenAPI description of the Anthropic Messages API routes: path items and request schemas.

The request schemas take their ranges from the sampling parameters' table, as
every built-in route's do; :mod:`tercet.http.openapi` puts them under
``components`` when the routes are served.
"""

from __future__ import annotations

from tercet.http.openapi_operations import generation_operation, json_content, operation, request_body, responses
from tercet.http.openapi_schemas import nullable, object_schema, ranged
from tercet.sampling_params import FIELD_RANGES

INT64_MAX = (1 << 63) - 1
ERROR_REF = {"$ref": "#/components/schemas/AnthropicError"}
MESSAGES = generation_operation("createMessage", "Anthropic Messages API: a message", "AnthropicMessageRequest",
                                "the message (or its events, with stream: true)", ERROR_REF)
COUNT_TOKENS = {"post": operation(
    "countMessageTokens", "Anthropic Messages API: the prompt's tokens",
    responses(json_content(object_schema({"input_tokens": {"type": "integer", "minimum": 0, "maximum": INT64_MAX}},
                                         required=("input_tokens",)), "the count"),
              "400", "401", "404", "413", "500", "503", error_schema=ERROR_REF),
    request_body({"$ref": "#/components/schemas/AnthropicCountTokensRequest"}), ERROR_REF,
)}


def error_schema() -> dict:
    detail = object_schema({"type": {"type": "string"}, "message": {"type": "string"}}, required=("type", "message"))
    return object_schema({"type": {"type": "string", "enum": ["error"]}, "error": detail}, required=("type", "error"))


def _text_blocks() -> dict:
    text = object_schema({"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
                         required=("type", "text"))
    return {"type": "array", "items": text}


def _content() -> dict:
    block = object_schema({"type": {"type": "string", "enum": ["text", "tool_use", "tool_result", "thinking"]}},
                          required=("type",), description="text, tool_use (assistant), tool_result (user)")
    return {"oneOf": [{"type": "string"}, {"type": "array", "items": block}]}


def _tools() -> dict:
    tool = object_schema(
        {"name": {"type": "string"}, "description": {"type": "string"}, "input_schema": {"type": "object"}},
        required=("name", "input_schema"),
    )
    choice = object_schema(
        {"type": {"type": "string", "enum": ["auto", "any", "tool", "none"]}, "name": {"type": "string"}},
        required=("type",), description="a tool's name with type tool",
    )
    return {"tools": {"type": "array", "items": tool}, "tool_choice": choice}


def count_tokens_request() -> dict:
    message = object_schema({"role": {"type": "string", "enum": ["user", "assistant"]}, "content": _content()},
                            required=("role", "content"))
    return object_schema(
        {
            "model": {"type": "string", "description": "must be the served model's name"},
            "system": {"oneOf": [{"type": "string"}, _text_blocks()]},
            "messages": {"type": "array", "minItems": 1, "items": message},
            **_tools(),
        },
        required=("messages",),
    )


def message_request(max_tokens_limit: int | None = None, vocab_size: int | None = None) -> dict:
    schema = count_tokens_request()
    schema["properties"].update({
        "max_tokens": ranged(FIELD_RANGES["max_new_tokens"], cap=max_tokens_limit),
        "temperature": nullable(ranged(FIELD_RANGES["temperature"])),
        "top_p": nullable(ranged(FIELD_RANGES["top_p"])),
        "top_k": nullable(ranged(FIELD_RANGES["top_k"], vocab_size)),
        "stop_sequences": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "metadata": object_schema({"user_id": nullable({"type": "string", "maxLength": 256})}),
        "stream": {"type": "boolean"},
    })
    schema["required"] = ["messages", "max_tokens"]
    return schema
