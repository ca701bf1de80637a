"""The OpenAPI description of the OpenAI Responses API route: its path item and request schema.

The ranges come from the sampling parameters' table, as every built-in route's
do; :mod:`tercet.http.openapi.openapi_document` puts the schema under ``components`` when the
route is served.
"""

from __future__ import annotations

from tercet.http.openai.tool_request import FUNCTION_NAME_PATTERN
from tercet.http.openapi.openapi_operations import generation_operation
from tercet.http.openapi.openapi_schemas import nullable, object_schema, ranged
from tercet.http.responses.responses_options import (
    EFFORTS,
    MAX_METADATA_KEY,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE,
    SUMMARIES,
    VERBOSITIES,
)
from tercet.http.responses.responses_request import ROLES, TEXT_PARTS
from tercet.http.structured_output import SCHEMA_NAME_PATTERN
from tercet.sampling_params import FIELD_RANGES

RESPONSES = generation_operation("createResponse", "OpenAI Responses API: a response (stateless)", "ResponsesRequest",
                                 "the response (or its events, with stream: true)")


def _input() -> dict:
    part = object_schema({"type": {"type": "string", "enum": list(TEXT_PARTS)}, "text": {"type": "string"}},
                         required=("type", "text"))
    content = {"oneOf": [{"type": "string"}, {"type": "array", "items": part}]}
    text_id = {"type": "string", "minLength": 1}
    message = object_schema({"type": {"type": "string", "enum": ["message"]},
                             "role": {"type": "string", "enum": list(ROLES)}, "content": content},
                            required=("role", "content"), description="a message; type may be left out")
    call = object_schema({"type": {"type": "string", "enum": ["function_call"]}, "call_id": text_id, "name": text_id,
                          "arguments": {"type": "string", "description": "JSON text"}},
                         required=("type", "call_id", "name"), description="a past call")
    output = object_schema({"type": {"type": "string", "enum": ["function_call_output"]}, "call_id": text_id,
                            "output": content}, required=("type", "call_id", "output"), description="a call's result")
    # Past reasoning is taken and dropped, whatever it holds.
    reasoning = object_schema({"type": {"type": "string", "enum": ["reasoning"]}}, required=("type",))
    items = {"type": "array", "minItems": 1, "items": {"oneOf": [message, call, output, reasoning]}}
    return {"oneOf": [{"type": "string"}, items]}


def _tools() -> dict:
    tool = object_schema(
        {"type": {"type": "string", "enum": ["function"]}, "name": {"type": "string", "pattern": FUNCTION_NAME_PATTERN},
         "description": nullable({"type": "string"}), "parameters": nullable({"type": "object"}),
         "strict": nullable({"type": "boolean"})},
        required=("type", "name"),
    )
    named = object_schema({"type": {"type": "string", "enum": ["function"]},
                           "name": {"type": "string", "minLength": 1}}, required=("type", "name"))
    return {
        "tools": nullable({"type": "array", "items": tool}),
        "tool_choice": nullable({"oneOf": [{"type": "string", "enum": ["auto", "none", "required"]}, named],
                                 "description": "required and a named function need tools; the name is one of them"}),
        "parallel_tool_calls": nullable({"type": "boolean"}),
    }


def _text() -> dict:
    json_schema = object_schema(
        {"type": {"type": "string", "enum": ["json_schema"]},
         "name": {"type": "string", "pattern": SCHEMA_NAME_PATTERN}, "schema": {"type": "object"}, "strict": nullable({"type": "boolean"}),
         "description": nullable({"type": "string"})},
        required=("type", "name", "schema"),
    )
    plain = object_schema({"type": {"type": "string", "enum": ["text", "json_object"]}}, required=("type",))
    return nullable(object_schema({"format": nullable({"oneOf": [plain, json_schema]}),
                                   "verbosity": nullable({"type": "string", "enum": list(VERBOSITIES)})}))


def _options() -> dict:
    """The options a response repeats, in the shape OpenAI's Response object allows."""
    metadata = {"type": "object", "maxProperties": MAX_METADATA_PAIRS,
                "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE},
                "description": f"keys of at most {MAX_METADATA_KEY} characters"}
    reasoning = object_schema({"effort": nullable({"type": "string", "enum": list(EFFORTS)}),
                               "summary": nullable({"type": "string", "enum": list(SUMMARIES)})})
    return {"metadata": nullable(metadata), "reasoning": nullable(reasoning)}


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
            **_options(),
            "user": nullable({"type": "string", "maxLength": 256}),
        },
        required=("input",),
    )
