"""Consuming a TokenizerManager generation from an HTTP handler, shared by every route.

A generation is started by waiting for its first piece, so a bad or refused
request is answered with its own status before a streaming 200 goes out; a
client that leaves at any point gets its request aborted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request

from tercet.http.errors import raise_if_refused
from tercet.http.sse import cancel_on_disconnect
from tercet.io_struct import GenerateOutput, GenerateRequest


class GenerationStream:
    """The pieces of one generation, the first one already received.

    ``aclose`` closes the TokenizerManager's iterator, which aborts the request
    if it has not finished; closing twice is harmless.
    """

    def __init__(self, first: GenerateOutput, rest: AsyncIterator[GenerateOutput]):
        self._first: GenerateOutput | None = first
        self._rest = rest

    def __aiter__(self) -> "GenerationStream":
        return self

    async def __anext__(self) -> GenerateOutput:
        if self._first is not None:
            piece, self._first = self._first, None
            return piece
        return await anext(self._rest)

    async def aclose(self) -> None:
        await _close(self._rest)


async def start_generation(outputs: AsyncIterator[GenerateOutput]) -> GenerationStream:
    """Wait for the first piece, so that a bad or refused request is answered
    with its own status before a streaming 200 goes out."""
    try:
        first = await anext(outputs)
        raise_if_refused(first.finish_reason)
    except StopAsyncIteration:
        await _close(outputs)
        raise RuntimeError("the generation ended without any output") from None
    except BaseException:
        await _close(outputs)
        raise
    return GenerationStream(first, outputs)


async def open_generation(request: Request, tokenizer_manager, generate_request: GenerateRequest) -> GenerationStream:
    """Start a generation; if the client leaves before the first piece, it is aborted."""
    return await cancel_on_disconnect(request.receive, start_generation(tokenizer_manager.generate(generate_request)))


async def collect_generation(request: Request, stream: GenerationStream) -> GenerateOutput:
    """The whole output as one piece; a client that leaves meanwhile aborts it."""
    try:
        return await cancel_on_disconnect(request.receive, _merge(stream))
    finally:
        await stream.aclose()


async def _merge(stream: GenerationStream) -> GenerateOutput:
    texts: list[str] = []
    token_ids: list[int] = []
    async for piece in stream:
        texts.append(piece.text)
        token_ids.extend(piece.token_ids)
        if piece.finished:
            raise_if_refused(piece.finish_reason)
            return dataclasses.replace(piece, text="".join(texts), token_ids=token_ids)
    raise RuntimeError("the generation ended without a finish reason")


async def _close(outputs: AsyncIterator) -> None:
    aclose = getattr(outputs, "aclose", None)
    if aclose is not None:
        await aclose()
