"""``POST /v1/embeddings``, OpenAI's embeddings API.

The answer: ``{"object": "list", "data": [{"object": "embedding", "index": i,
"embedding": [floats] or "base64"}], "model", "usage": {"prompt_tokens",
"total_tokens"}}``, one entry per input in input order. A client that leaves
before the answer has its inputs still waiting aborted.
"""

from __future__ import annotations

import base64
import struct

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.frontend.io_struct import EmbeddingOutput
from tercet.http.errors import read_json_object
from tercet.http.openai.embedding_request import OpenAIEmbeddingRequest, parse_embedding_request
from tercet.http.sse import cancel_on_disconnect
from tercet.model_abilities import NO_POOLING


async def create_embedding(request: Request, tokenizer_manager) -> Response:
    abilities = tokenizer_manager.abilities
    if not abilities.can_embed:  # before the body: whatever it holds, this model cannot answer it
        raise RequestError(NO_POOLING, "model")
    body = await read_json_object(request)
    openai_request = parse_embedding_request(
        body, tokenizer_manager.served_model_name, tokenizer_manager.vocab_size, abilities.embedding_size
    )
    outputs = await cancel_on_disconnect(request.receive, tokenizer_manager.embed(openai_request.embedding_request))
    return JSONResponse(embedding_response(openai_request, outputs))


def embedding_response(openai_request: OpenAIEmbeddingRequest, outputs: list[EmbeddingOutput]) -> dict:
    prompt_tokens = sum(output.prompt_tokens for output in outputs)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": output.index,
             "embedding": encoded(output.embedding, openai_request.encoding_format)}
            for output in outputs
        ],
        "model": openai_request.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def encoded(vector: bytes, encoding_format: str) -> list[float] | str:
    """A vector's little-endian float32 bytes as JSON numbers, or as base64 text."""
    if encoding_format == "base64":
        return base64.b64encode(vector).decode("ascii")
    return list(struct.unpack(f"<{len(vector) // 4}f", vector))

