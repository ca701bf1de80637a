"""The OpenAI Responses API: ``POST /v1/responses``, stateless.

Served over chat completions (:mod:`tercet.http.chat.chat_bridge`): a body is
translated (:mod:`tercet.http.responses.responses_request`), generated as a chat completion
would be, and its answer written as a response of output items
(:mod:`tercet.http.responses.responses_output`), or streamed as the Responses API's events
(:mod:`tercet.http.responses.responses_stream`). Nothing is stored: a response cannot be
retrieved or continued by its id.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.http.chat.chat_blocks import message_blocks
from tercet.http.chat.chat_bridge import answer_chat, parse_chat_body, stream_chat
from tercet.http.errors import read_json_object
from tercet.http.responses.responses_output import ResponseHeader, new_item_id, output_items, status_of, usage
from tercet.http.responses.responses_request import translate
from tercet.http.responses.responses_stream import response_events, responses_event_stream
from tercet.http.sse import EventStreamResponse


async def create_response(request: Request, tokenizer_manager) -> Response:
    translation = translate(await read_json_object(request))
    fields = translation.fields
    openai_request = await parse_chat_body(translation.chat, request, tokenizer_manager, fields)
    header = ResponseHeader.of(translation.echoed, openai_request.model)
    if openai_request.stream:
        chunks, watch = await stream_chat(request, tokenizer_manager, openai_request, fields)
        events = response_events(header, chunks, watch)
        return EventStreamResponse(responses_event_stream(events), on_close=watch.stream.aclose)
    answer = await answer_chat(request, tokenizer_manager, openai_request, fields)
    blocks = message_blocks(answer.message)
    status, reason = status_of(answer.watch)
    output = output_items(blocks, [new_item_id(block.kind) for block in blocks], status)
    return JSONResponse(header.response(status, output, usage(answer.watch), reason))
