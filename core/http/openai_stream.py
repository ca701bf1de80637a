"""Streamed OpenAI answers: chunks per completion index, then the usage chunk.

With ``n > 1`` the pieces of the n completions arrive interleaved; every chunk
names its choice ``index`` and each index gets its own finish chunk. The
usage chunk (``stream_options.include_usage``) comes once all n are done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from tercet.http.errors import raise_if_refused
from tercet.http.generation import GenerationStream, PromptDetails
from tercet.http.logprobs_format import TokenStrings, chat_logprobs, completion_logprobs, text_length
from tercet.http.openai_request import OpenAIRequest
from tercet.http.openai_response import (
    chat_completion_chunk,
    completion_chunk,
    openai_finish_reason,
    output_logprobs,
    prompt_text,
    usage_chunk,
)
from tercet.io_struct import GenerateOutput


class ChoiceProgress:
    """What the stream has seen of each of the n completions."""

    def __init__(self, n: int):
        self.finished = [False] * n
        self.completion_tokens = [0] * n
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.prompt = PromptDetails()

    def note(self, piece: GenerateOutput) -> None:
        if not 0 <= piece.index < len(self.finished):
            raise RuntimeError(f"output for completion {piece.index} of a request with n={len(self.finished)}")
        raise_if_refused(piece.finish_reason)
        self.prompt.note(piece)
        self.prompt_tokens = piece.prompt_tokens
        self.cached_tokens = piece.cached_tokens
        self.completion_tokens[piece.index] = piece.completion_tokens
        if piece.finished:
            self.finished[piece.index] = True

    @property
    def all_finished(self) -> bool:
        return all(self.finished)

    def usage_chunk(self, request: OpenAIRequest, object_name: str) -> dict:
        return usage_chunk(request, object_name, self.prompt_tokens, sum(self.completion_tokens), self.cached_tokens)


async def completion_chunks(request: OpenAIRequest, stream: GenerationStream, strings: TokenStrings | None) -> AsyncIterator[dict]:
    progress = ChoiceProgress(request.n)
    offsets = [0] * request.n  # text_offset, per choice, of the next token
    echoed = [False] * request.n
    # Echoed log-probabilities come with index 0's first piece; other indices wait for it.
    waits_for_prompt = request.echo and request.wants_logprobs
    waiting: list[GenerateOutput] = []
    async for piece in stream:
        progress.note(piece)
        if waits_for_prompt and progress.prompt.logprobs is None:
            waiting.append(piece)
            continue
        ready, waiting = [*waiting, piece], []
        for ready_piece in ready:
            for chunk in _completion_piece_chunks(request, ready_piece, strings, progress, offsets, echoed):
                yield chunk
        if progress.all_finished:
            if request.include_usage:
                yield progress.usage_chunk(request, "text_completion")
            return
    if waiting:
        raise RuntimeError("the server returned no prompt log-probabilities for an echo request")


def _completion_piece_chunks(
    request: OpenAIRequest,
    piece: GenerateOutput,
    strings: TokenStrings | None,
    progress: ChoiceProgress,
    offsets: list[int],
    echoed: list[bool],
) -> Iterator[dict]:
    index = piece.index
    if request.echo and not echoed[index]:
        echoed[index] = True
        logprobs = None
        if request.wants_logprobs:
            logprobs = completion_logprobs(strings, progress.prompt.logprobs, request.num_top_logprobs, 0)
            offsets[index] = text_length(logprobs)
        yield completion_chunk(request, index, prompt_text(request, strings, progress.prompt.token_ids), logprobs)
    logprobs = None
    if request.wants_logprobs and piece.token_ids:
        logprobs = completion_logprobs(strings, output_logprobs(piece), request.num_top_logprobs, offsets[index])
        offsets[index] += text_length(logprobs)
    if piece.text or logprobs:
        yield completion_chunk(request, index, piece.text, logprobs)
    if piece.finished:
        # OpenAI sends the finish reason in a chunk of its own.
        yield completion_chunk(request, index, "", None, openai_finish_reason(piece.finish_reason))


async def chat_completion_chunks(
    request: OpenAIRequest, stream: GenerationStream, strings: TokenStrings | None
) -> AsyncIterator[dict]:
    for index in range(request.n):
        yield chat_completion_chunk(request, index, {"role": "assistant", "content": ""})
    progress = ChoiceProgress(request.n)
    async for piece in stream:
        progress.note(piece)
        logprobs = None
        if request.wants_logprobs and piece.token_ids:
            logprobs = chat_logprobs(strings, output_logprobs(piece), request.num_top_logprobs)
        if piece.text or logprobs:
            yield chat_completion_chunk(request, piece.index, {"content": piece.text}, logprobs)
        if piece.finished:
            yield chat_completion_chunk(request, piece.index, {}, None, openai_finish_reason(piece.finish_reason))
        if progress.all_finished:
            if request.include_usage:
                yield progress.usage_chunk(request, "chat.completion.chunk")
            return
