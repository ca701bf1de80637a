"""The OpenAPI description of the Anthropic Messages API routes: path items and request schemas.

The request schemas take their ranges from the sampling parameters' table, as
every built-in route's do; :mod:`tercet.http.openapi.openapi_document` puts them under
``components`` when the routes are served.
"""

from __future__ import annotations

from tercet.http.anthropic.anthropic_request import THINKING_BUDGET
from tercet.http.openai.tool_request import FUNCTION_NAME_PATTERN
from tercet.http.openapi.openapi_operations import (
    generation_operation,
    json_content,
    operation,
    request_body,
    responses,
)
from tercet.http.openapi.openapi_schemas import nullable, object_schema, ranged
from tercet.sampling_params import FIELD_RANGES, MAX_STOP_STRINGS

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


def _text_block() -> dict:
    return object_schema({"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
                         required=("type", "text"))


def _text_blocks() -> dict:
    return {"type": "array", "items": _text_block()}


def _tool_use_block() -> dict:
    return object_schema(
        {"type": {"type": "string", "enum": ["tool_use"]}, "id": {"type": "string", "minLength": 1},
         "name": {"type": "string", "minLength": 1}, "input": {"type": "object"}},
        required=("type", "id", "name"), description="a past call",
    )


def _tool_result_block() -> dict:
    return object_schema(
        {"type": {"type": "string", "enum": ["tool_result"]}, "tool_use_id": {"type": "string", "minLength": 1},
         "content": nullable({"oneOf": [{"type": "string"}, _text_blocks()]}),
         "is_error": nullable({"type": "boolean"})},
        required=("type", "tool_use_id"), description="a call's result",
    )


def _message(role: str, blocks: list[dict]) -> dict:
    content = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"oneOf": blocks}}]}
    return object_schema({"role": {"type": "string", "enum": [role]}, "content": content}, required=("role", "content"))


def _messages() -> dict:
    # Past reasoning is taken and dropped, whatever it holds.
    thinking = object_schema({"type": {"type": "string", "enum": ["thinking", "redacted_thinking"]}},
                             required=("type",))
    user = _message("user", [_text_block(), _tool_result_block()])
    assistant = _message("assistant", [_text_block(), _tool_use_block(), thinking])
    return {"type": "array", "minItems": 1, "items": {"oneOf": [user, assistant]}}


def _tools() -> dict:
    tool = object_schema(
        {"name": {"type": "string", "pattern": FUNCTION_NAME_PATTERN}, "description": nullable({"type": "string"}),
         "input_schema": {"type": "object"}},
        required=("name", "input_schema"),
    )
    parallel = {"disable_parallel_tool_use": nullable({"type": "boolean"})}
    choice = {"oneOf": [
        object_schema({"type": {"type": "string", "enum": ["auto", "any", "none"]}, **parallel}, required=("type",)),
        object_schema({"type": {"type": "string", "enum": ["tool"]}, "name": {"type": "string", "minLength": 1},
                       **parallel}, required=("type", "name")),
    ], "description": "any and tool need tools; a tool's name is one of them"}
    return {"tools": {"type": "array", "items": tool}, "tool_choice": choice}


def count_tokens_request() -> dict:
    return object_schema(
        {
            "model": {"type": "string", "description": "must be the served model's name"},
            "system": nullable({"oneOf": [{"type": "string"}, _text_blocks()]}),
            "messages": _messages(),
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
        "stop_sequences": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_STOP_STRINGS},
        "metadata": object_schema({"user_id": nullable({"type": "string", "maxLength": 256})}),
        "thinking": {"oneOf": [
            object_schema({"type": {"type": "string", "enum": ["enabled"]},
                           "budget_tokens": ranged(THINKING_BUDGET)}, required=("type", "budget_tokens")),
            object_schema({"type": {"type": "string", "enum": ["disabled"]}}, required=("type",)),
        ], "description": "enabled needs the server's reasoning parser"},
        "stream": {"type": "boolean"},
    })
    schema["required"] = ["messages", "max_tokens"]
    return schema
