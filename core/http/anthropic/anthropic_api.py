"""The Anthropic Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Served over chat completions (:mod:`tercet.http.chat.chat_bridge`): a body is
translated (:mod:`tercet.http.anthropic.anthropic_request`), generated as a chat completion
would be, and its answer written as a message of content blocks
(:mod:`tercet.http.anthropic.anthropic_response`), or streamed as the Messages API's
events (:mod:`tercet.http.anthropic.anthropic_stream`). Errors are in Anthropic's shape
(the route registers :func:`anthropic_error_body` as its error body).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.anthropic.anthropic_request import require_thinking_support, thinking_enabled, translate
from tercet.http.anthropic.anthropic_response import content_block, message, new_message_id, stop_reason, usage
from tercet.http.anthropic.anthropic_stream import anthropic_event_stream, message_events
from tercet.http.chat.chat_blocks import REASONING, REASONING_FIELD, message_blocks
from tercet.http.chat.chat_bridge import answer_chat, count_chat_tokens, parse_chat_body, stream_chat
from tercet.http.errors import read_json_object
from tercet.http.sse import EventStreamResponse


async def create_message(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    translation = translate(body)
    require_thinking_support(body, tokenizer_manager.reasoning)
    fields = translation.fields
    openai_request = await parse_chat_body(translation.chat, request, tokenizer_manager, fields)
    stop_sequences = translation.chat.get("stop", [])
    # A reasoning parser always keeps the reasoning out of the text; it is shown only when asked for.
    shows_thinking = thinking_enabled(body)
    if openai_request.stream:
        chunks, watch = await stream_chat(request, tokenizer_manager, openai_request, fields)
        chunks = chunks if shows_thinking else _without_reasoning(chunks)
        events = message_events(openai_request, chunks, watch, stop_sequences)
        return EventStreamResponse(anthropic_event_stream(events), on_close=watch.stream.aclose)
    answer = await answer_chat(request, tokenizer_manager, openai_request, fields)
    content = [content_block(block) for block in message_blocks(answer.message)
               if shows_thinking or block.kind != REASONING]
    reason = stop_reason(answer.chat_finish_reason, answer.watch, stop_sequences)
    return JSONResponse(message(new_message_id(), openai_request.model, content, reason, usage(answer.watch)))


async def _without_reasoning(chunks: AsyncIterator[dict]) -> AsyncIterator[dict]:
    async for chunk in chunks:
        for choice in chunk["choices"]:
            choice["delta"].pop(REASONING_FIELD, None)
        yield chunk


async def count_tokens(request: Request, tokenizer_manager) -> Response:
    """The prompt's tokens as the model would see them: system, messages and tools through the chat
    template, however many (a count bounded by the context would refuse what it is asked to measure)."""
    translation = translate(await read_json_object(request), count_only=True)
    return JSONResponse({"input_tokens": await count_chat_tokens(translation.chat, tokenizer_manager,
                                                                 translation.fields)})
