"""OpenAI-compatible routes: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.errors import raise_if_refused, read_json_object
from tercet.http.generation import GenerationStream, collect_generation, open_generation
from tercet.http.openai_protocol import (
    OpenAIRequest,
    chat_completion_chunk,
    chat_completion_response,
    completion_chunk,
    completion_response,
    openai_finish_reason,
    parse_chat_completion_request,
    parse_completion_request,
    usage_chunk,
)
from tercet.http.sse import EventStreamResponse, event_stream
from tercet.io_struct import GenerateOutput

# /v1/models reports when this server came up as the model's "created" time.
STARTED_AT = int(time.time())


async def create_completion(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    openai_request = parse_completion_request(body, tokenizer_manager.served_model_name)
    return await _respond(request, tokenizer_manager, openai_request, completion_response, _completion_chunks)


async def create_chat_completion(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    openai_request = parse_chat_completion_request(
        body,
        tokenizer_manager.served_model_name,
        tokenizer_manager.context_len,
        tokenizer_manager.apply_chat_template,
    )
    return await _respond(request, tokenizer_manager, openai_request, chat_completion_response, _chat_completion_chunks)


async def list_models(request: Request, tokenizer_manager) -> Response:
    model = {"id": tokenizer_manager.served_model_name, "object": "model", "created": STARTED_AT, "owned_by": "tercet"}
    return JSONResponse({"object": "list", "data": [model]})


async def _respond(
    request: Request,
    tokenizer_manager,
    openai_request: OpenAIRequest,
    build_response: Callable[[OpenAIRequest, GenerateOutput], dict],
    build_chunks: Callable[[OpenAIRequest, GenerationStream], AsyncIterator[dict]],
) -> Response:
    stream = await open_generation(request, tokenizer_manager, openai_request.generate_request)
    if openai_request.stream:
        return EventStreamResponse(event_stream(build_chunks(openai_request, stream)), on_close=stream.aclose)
    return JSONResponse(build_response(openai_request, await collect_generation(request, stream)))


async def _completion_chunks(openai_request: OpenAIRequest, stream: GenerationStream) -> AsyncIterator[dict]:
    async for piece in stream:
        raise_if_refused(piece.finish_reason)
        if piece.text:
            yield completion_chunk(openai_request, piece.text)
        if piece.finished:
            # OpenAI sends the finish reason in a chunk of its own, then usage.
            yield completion_chunk(openai_request, "", openai_finish_reason(piece.finish_reason))
            if openai_request.include_usage:
                yield usage_chunk(openai_request, "text_completion", piece)
            return


async def _chat_completion_chunks(openai_request: OpenAIRequest, stream: GenerationStream) -> AsyncIterator[dict]:
    yield chat_completion_chunk(openai_request, {"role": "assistant", "content": ""})
    async for piece in stream:
        raise_if_refused(piece.finish_reason)
        if piece.text:
            yield chat_completion_chunk(openai_request, {"content": piece.text})
        if piece.finished:
            yield chat_completion_chunk(openai_request, {}, openai_finish_reason(piece.finish_reason))
            if openai_request.include_usage:
                yield usage_chunk(openai_request, "chat.completion.chunk", piece)
            return


ROUTES = [
    ("/v1/completions", create_completion, ["POST"]),
    ("/v1/chat/completions", create_chat_completion, ["POST"]),
    ("/v1/models", list_models, ["GET"]),
]
