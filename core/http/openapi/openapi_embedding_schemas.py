"""The schemas of ``POST /v1/embeddings`` in ``GET /openapi.json``: its request and its response.

As for the other routes (:mod:`tercet.http.openapi.openapi_schemas`), the document is
no stricter than the parser (:mod:`tercet.http.openai.embedding_request`).
"""

from __future__ import annotations

from tercet.http.openai.embedding_request import ENCODING_FORMATS
from tercet.http.openapi.openapi_schemas import DEFAULT_MAX_PROMPTS, nullable, object_schema, token_ids_schema

# The largest dimensions value the document allows: any int64 (the parser accepts only the model's own size).
MAX_DIMENSIONS = (1 << 63) - 1


def embedding_request(vocab_size: int | None = None, max_prompts: int = DEFAULT_MAX_PROMPTS) -> dict:
    """``POST /v1/embeddings`` (docs/api.md "Embeddings")."""
    text, token_ids = {"type": "string", "minLength": 1}, token_ids_schema(vocab_size, min_items=1)

    def inputs(item: dict) -> dict:
        return {"type": "array", "minItems": 1, "maxItems": max_prompts, "items": item,
                "description": f"at most {max_prompts} inputs"}

    input_schema = {
        "oneOf": [text, token_ids, inputs(text), inputs(token_ids)],
        "description": "a string, a list of token ids, or a list of either: one embedding each, in order",
    }
    properties = {
        "input": input_schema,
        "model": nullable({"type": "string", "description": "must be the served model's name"}),
        "encoding_format": nullable({"type": "string", "enum": list(ENCODING_FORMATS)}),
        "dimensions": nullable({
            "type": "integer", "minimum": 1, "maximum": MAX_DIMENSIONS,
            "description": "only the model's own embedding size: no served model is trained to be shortened",
        }),
        "user": nullable({"type": "string"}),
    }
    return object_schema(properties, required=("input",))


def embedding_response() -> dict:
    vector = {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string", "format": "byte"}]}
    item = object_schema(
        {"object": {"type": "string", "enum": ["embedding"]}, "index": {"type": "integer", "minimum": 0,
                                                                         "maximum": MAX_DIMENSIONS},
         "embedding": vector},
        required=("object", "index", "embedding"),
    )
    count = {"type": "integer", "minimum": 0, "maximum": MAX_DIMENSIONS}
    return object_schema(
        {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": item},
            "model": {"type": "string"},
            "usage": object_schema({"prompt_tokens": count, "total_tokens": count},
                                   required=("prompt_tokens", "total_tokens")),
        },
        required=("object", "data", "model", "usage"),
    )
