"""A streamed OpenAI response: the Responses API's events, as its SDK's ``responses.stream`` reads them.

``response.created`` and ``response.in_progress``; for each output item
``response.output_item.added``, its parts and deltas (``output_text``,
``function_call_arguments``, ``reasoning_text``), their ``done`` events and
``response.output_item.done``; then ``response.completed`` (or
``response.incomplete``, cut by ``max_output_tokens``) with the whole response.
Every event is named on an ``event:`` line and numbered (``sequence_number``).
An error after the 200 went out is an ``error`` event in OpenAI's error shape.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from tercet.errors import RequestError
from tercet.http.chat.chat_blocks import REASONING, TEXT, BlockDelta, BlockEvents, BlockStart, BlockStop
from tercet.http.chat.chat_bridge import FinishWatch
from tercet.http.errors import INTERNAL_ERROR_MESSAGE, error_payload
from tercet.http.responses.responses_output import ResponseHeader, new_item_id, output_item, status_of, text_part, usage
from tercet.http.sse import encode_event

logger = logging.getLogger(__name__)
DELTA_EVENTS = {TEXT: "response.output_text.delta", REASONING: "response.reasoning_text.delta"}


class ItemEvents:
    """The Responses events of a stream's blocks; each block is one output item, numbered by its block's index."""

    def __init__(self):
        self.item_ids: list[str] = []
        self.items: list[dict] = []

    def of(self, event, status: str = "completed") -> list[dict]:
        """The events of one block event; ``status``: what a block stopping now has become."""
        if isinstance(event, BlockStart):
            self.item_ids.append(new_item_id(event.block.kind))
            return self._started(event)
        item_id = self.item_ids[event.index]
        where = {"item_id": item_id, "output_index": event.index}
        if isinstance(event, BlockDelta):
            if event.kind == "tool_call":
                return [{"type": "response.function_call_arguments.delta", **where, "delta": event.text}]
            return [{"type": DELTA_EVENTS[event.kind], **where, "content_index": 0, "delta": event.text,
                     "logprobs": []}]
        assert isinstance(event, BlockStop)
        item = output_item(event.block, item_id, status)
        self.items.append(item)
        return [*self._content_done(event, where), {"type": "response.output_item.done", "output_index": event.index,
                                                    "item": item}]

    def _started(self, event: BlockStart) -> list[dict]:
        item_id = self.item_ids[event.index]
        events = [{"type": "response.output_item.added", "output_index": event.index,
                   "item": output_item(event.block, item_id, "in_progress")}]
        if event.block.kind == TEXT:
            events.append({"type": "response.content_part.added", "item_id": item_id, "output_index": event.index,
                           "content_index": 0, "part": text_part("")})
        return events

    def _content_done(self, event: BlockStop, where: dict) -> list[dict]:
        block = event.block
        if block.kind == TEXT:
            return [{"type": "response.output_text.done", **where, "content_index": 0, "text": block.text,
                     "logprobs": []},
                    {"type": "response.content_part.done", **where, "content_index": 0, "part": text_part(block.text)}]
        if block.kind == REASONING:
            return [{"type": "response.reasoning_text.done", **where, "content_index": 0, "text": block.text}]
        return [{"type": "response.function_call_arguments.done", **where, "name": block.name,
                 "arguments": block.text}]


async def response_events(header: ResponseHeader, chunks: AsyncIterator[dict], watch: FinishWatch) -> AsyncIterator[dict]:
    """The Responses events of one streamed answer, from its chat completion chunks (not yet numbered)."""
    in_progress = header.response("in_progress", [])
    yield {"type": "response.created", "response": in_progress}
    yield {"type": "response.in_progress", "response": in_progress}
    blocks, items = BlockEvents(), ItemEvents()
    async for chunk in chunks:
        for choice in chunk["choices"]:
            for block_event in blocks.add(choice["delta"]):
                for event in items.of(block_event):
                    yield event
    status, reason = status_of(watch)
    for block_event in blocks.finish():  # the last block is as complete as the answer
        for event in items.of(block_event, status):
            yield event
    final = header.response(status, items.items, usage(watch), reason)
    yield {"type": f"response.{status}", "response": final}


async def responses_event_stream(events: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    """Number and encode the events; a failure becomes an ``error`` event (nothing of it leaks)."""
    sequence_number = 0
    try:
        async for event in events:
            yield encode_event({**event, "sequence_number": sequence_number}, event["type"])
            sequence_number += 1
    except RequestError as exc:
        yield _error_event(error_payload(exc.message, exc.status_code, exc.param), sequence_number)
    except Exception:
        logger.exception("error while streaming a response")
        yield _error_event(error_payload(INTERNAL_ERROR_MESSAGE, 500), sequence_number)


def _error_event(payload: dict, sequence_number: int) -> bytes:
    error = payload["error"]
    event = {"type": "error", "code": error["code"], "message": error["message"], "param": error["param"],
             "sequence_number": sequence_number}
    return encode_event(event, "error")
