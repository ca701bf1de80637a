"""Server-sent events, and what happens when the client goes away.

A stream is ``data: {json}\\n\\n`` events ending with ``data: [DONE]\\n\\n``. An
error after the 200 status went out can only travel inside the stream, so it
becomes one ``data: {"error": …}`` event before ``[DONE]``.

A client that disconnects must abort its generation: :func:`cancel_on_disconnect`
and :class:`EventStreamResponse` make sure the generation's iterator is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tercet.errors import RequestError
from tercet.http.errors import INTERNAL_ERROR_MESSAGE, error_payload, payload_for

logger = logging.getLogger(__name__)

DONE_EVENT = b"data: [DONE]\n\n"
T = TypeVar("T")


# Valid inside a JSON string, but line breaks to Python's str.splitlines (which
# httpx's iter_lines follows) and to older JavaScript: escaped, an event stays one line.
_LINE_BREAKS_JSON_ALLOWS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def encode_event(data: dict, name: str | None = None) -> bytes:
    """One event; ``name`` gives it an ``event:`` line (the Anthropic API names every event)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS_JSON_ALLOWS)
    named = b"" if name is None else b"event: " + name.encode() + b"\n"
    return named + b"data: " + text.encode() + b"\n\n"


async def event_stream(events: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    """Encode ``events`` as SSE; a failure becomes an error event; always end with ``[DONE]``."""
    try:
        async for event in events:
            yield encode_event(event)
    except RequestError as exc:
        yield encode_event(payload_for(exc))
    except Exception:
        logger.exception("error while streaming a response")
        yield encode_event(error_payload(INTERNAL_ERROR_MESSAGE, 500))
    yield DONE_EVENT


async def cancel_on_disconnect(receive: Receive, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``; if the client disconnects first, cancel it and raise ``ClientDisconnect``.

    Only call this after the request body has been read: it consumes ``receive``.
    """
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # A watcher that failed (the server's receive broke) counts as a
        # disconnect too; its exception is dropped on purpose.
        await _cancel_and_wait(watcher, drop_exception=True)
        await _cancel_and_wait(work)
    if work.cancelled():
        raise ClientDisconnect()
    return work.result()


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that always closes its generation.

    Starlette's ``StreamingResponse`` neither watches for a disconnect on every
    ASGI version nor closes its body iterator, which would leave the request
    generating for nobody. Here the body is cancelled as soon as the client
    leaves, then the body iterator and ``on_close`` (the generation's own
    ``aclose``) are awaited, whatever state the generators were in.
    """

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]] | None = None):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await cancel_on_disconnect(receive, self._send_body(send))
        except ClientDisconnect:
            logger.debug("client disconnected during a stream")
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            if self.on_close is not None:
                await self.on_close()

    async def _send_body(self, send: Send) -> None:
        try:
            await self.stream_response(send)
        except OSError:
            # Some servers report a vanished client by failing the send.
            raise ClientDisconnect() from None


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancel_and_wait(task: asyncio.Future, drop_exception: bool = False) -> None:
    # asyncio.wait never raises the task's own exception or cancellation,
    # so a cancellation of the caller is the only thing that can escape here.
    if not task.done():
        task.cancel()
    await asyncio.wait((task,))
    if drop_exception and not task.cancelled():
        task.exception()
