"""A streamed Anthropic message: the events the Messages API sends, and the SDK expects.

``message_start``, then per content block ``content_block_start``, its
``content_block_delta``s and ``content_block_stop``, then ``message_delta``
(the stop reason and the output tokens) and ``message_stop``; each event named
on an ``event:`` line. An error after the 200 went out travels as an ``error``
event, in Anthropic's error shape, and ends the stream.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from tercet.errors import RequestError
from tercet.http.anthropic.anthropic_response import (
    anthropic_error_body,
    content_delta,
    empty_content_block,
    message,
    new_message_id,
    stop_reason,
    usage,
)
from tercet.http.chat.chat_blocks import BlockDelta, BlockEvents, BlockStart, BlockStop
from tercet.http.chat.chat_bridge import FinishWatch
from tercet.http.errors import INTERNAL_ERROR_MESSAGE
from tercet.http.openai.openai_request import OpenAIRequest
from tercet.http.sse import encode_event

logger = logging.getLogger(__name__)
Event = tuple[str, dict]


async def message_events(openai_request: OpenAIRequest, chunks: AsyncIterator[dict], watch: FinishWatch,
                         stop_sequences: list[str]) -> AsyncIterator[Event]:
    """The Messages API events of one streamed answer, from its chat completion chunks."""
    input_tokens = len(openai_request.generate_request.input_ids or ())
    start_usage = {"input_tokens": input_tokens, "output_tokens": 0}
    started = message(new_message_id(), openai_request.model, [], (None, None), start_usage)
    yield "message_start", {"type": "message_start", "message": started}
    blocks = BlockEvents()
    chat_finish_reason = None
    async for chunk in chunks:
        for choice in chunk["choices"]:
            for event in blocks.add(choice["delta"]):
                yield block_event(event)
            chat_finish_reason = choice["finish_reason"] or chat_finish_reason
    for event in blocks.finish():
        yield block_event(event)
    reason, sequence = stop_reason(chat_finish_reason, watch, stop_sequences)
    yield "message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": usage(watch),
    }
    yield "message_stop", {"type": "message_stop"}


def block_event(event) -> Event:
    if isinstance(event, BlockStart):
        return "content_block_start", {"type": "content_block_start", "index": event.index,
                                       "content_block": empty_content_block(event.block)}
    if isinstance(event, BlockDelta):
        return "content_block_delta", {"type": "content_block_delta", "index": event.index,
                                       "delta": content_delta(event.kind, event.text)}
    assert isinstance(event, BlockStop)
    return "content_block_stop", {"type": "content_block_stop", "index": event.index}


async def anthropic_event_stream(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """Encode the events; a failure becomes an ``error`` event (nothing of it leaks)."""
    try:
        async for name, data in events:
            yield encode_event(data, name)
    except RequestError as exc:
        yield encode_event(anthropic_error_body(exc.message, exc.status_code), "error")
    except Exception:
        logger.exception("error while streaming an Anthropic message")
        yield encode_event(anthropic_error_body(INTERNAL_ERROR_MESSAGE, 500), "error")
