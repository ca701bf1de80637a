"""The OpenAPI description of the OpenAI Responses API route: its path item and request schema.

The ranges come from the sampling parameters' table, as every built-in route's
do; :mod:`tercet.http.openapi` puts the schema under ``components`` when the
route is served.
"""

from __future__ import annotations

from tercet.http.openapi_operations import generation_operation
from tercet.http.openapi_schemas import nullable, object_schema, ranged
from tercet.sampling_params import FIELD_RANGES

RESPONSES = generation_operation("createResponse", "OpenAI Responses API: a response (stateless)", "ResponsesRequest",
                                 "the response (or its events, with stream: true)")


def _input() -> dict:
    part = object_schema({"type": {"type": "string", "enum": ["input_text", "output_text"]}, "text": {"type": "string"}},
                         required=("type", "text"))
    item = object_schema(
        {
            "type": {"type": "string", "enum": ["message", "function_call", "function_call_output"]},
            "role": {"type": "string", "enum": ["user", "system", "developer", "assistant"]},
            "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": part}]},
            "call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"},
            "output": {"type": "string"},
        },
        description="a message (role, content), a past function_call, or a function_call_output",
    )
    return {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": item}]}


def _tools() -> dict:
    tool = object_schema(
        {"type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"},
         "description": {"type": "string"}, "parameters": {"type": "object"}, "strict": {"type": "boolean"}},
        required=("type", "name"),
    )
    named = object_schema({"type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"}},
                          required=("type", "name"))
    return {
        "tools": {"type": "array", "items": tool},
        "tool_choice": {"oneOf": [{"type": "string", "enum": ["auto", "none", "required"]}, named]},
        "parallel_tool_calls": {"type": "boolean"},
    }


def _text() -> dict:
    text_format = object_schema(
        {"type": {"type": "string", "enum": ["text", "json_object", "json_schema"]}, "name": {"type": "string"},
         "schema": {"type": "object"}, "strict": {"type": "boolean"}},
        required=("type",), description="json_schema: name and schema",
    )
    return object_schema({"format": text_format})


def responses_request(max_tokens_limit: int | None = None) -> dict:
    return object_schema(
        {
            "model": {"type": "string", "description": "must be the served model's name"},
            "input": _input(),
            "instructions": nullable({"type": "string"}),
            "max_output_tokens": nullable(ranged(FIELD_RANGES["max_new_tokens"], cap=max_tokens_limit)),
            "temperature": nullable(ranged(FIELD_RANGES["temperature"])),
            "top_p": nullable(ranged(FIELD_RANGES["top_p"])),
            **_tools(),
            "text": _text(),
            "stream": {"type": "boolean"},
            "store": {"type": "boolean", "enum": [False], "description": "nothing is stored: true is refused"},
            "metadata": {"type": "object"},
            "user": nullable({"type": "string", "maxLength": 256}),
        },
        required=("input",),
    )
