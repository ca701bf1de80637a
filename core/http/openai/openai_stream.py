"""Streamed OpenAI answers: chunks per completion index, then the usage chunk.

With ``n > 1``, or a list of prompts, the pieces of the completions arrive
interleaved; every chunk names its choice ``index`` (``prompt × n + i``) and
each index gets its own finish chunk. The usage chunk
(``stream_options.include_usage``) comes once all are done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from tercet.frontend.io_struct import GenerateOutput
from tercet.http.errors import raise_if_refused
from tercet.http.generation import GenerationStream, PromptDetails, check_index
from tercet.http.logprobs_format import TokenStrings, chat_logprobs, completion_logprobs
from tercet.http.openai.openai_request import OpenAIRequest
from tercet.http.openai.openai_response import (
    chat_completion_chunk,
    completion_chunk,
    openai_finish_reason,
    output_logprobs,
    prompt_text,
    usage_chunk,
)
from tercet.http.openai.tool_output import ToolCallDeltas, finish_reason_with_calls
from tercet.http.text_offsets import TextOffsets


class ChoiceProgress:
    """What the stream has seen of each completion, n per prompt."""

    def __init__(self, n: int, num_prompts: int = 1):
        self.n = n
        self.finished = [False] * (num_prompts * n)
        self.completion_tokens = [0] * (num_prompts * n)
        self.prompt_tokens = [0] * num_prompts
        self.cached_tokens = [0] * num_prompts
        self.prompts = [PromptDetails() for _ in range(num_prompts)]

    def prompt_of(self, index: int) -> PromptDetails:
        return self.prompts[index // self.n]

    def note(self, piece: GenerateOutput) -> None:
        check_index(piece, len(self.finished))
        raise_if_refused(piece.finish_reason)
        self.prompt_of(piece.index).note(piece)
        self.prompt_tokens[piece.index // self.n] = piece.prompt_tokens
        self.cached_tokens[piece.index // self.n] = piece.cached_tokens
        self.completion_tokens[piece.index] = piece.completion_tokens
        if piece.finished:
            self.finished[piece.index] = True

    @property
    def all_finished(self) -> bool:
        return all(self.finished)

    def usage_chunk(self, request: OpenAIRequest, object_name: str) -> dict:
        # Each prompt counts once, as in a whole answer's usage.
        prompt_tokens, cached_tokens = sum(self.prompt_tokens), sum(self.cached_tokens)
        return usage_chunk(request, object_name, prompt_tokens, sum(self.completion_tokens), cached_tokens)


async def completion_chunks(request: OpenAIRequest, stream: GenerationStream, strings: TokenStrings | None) -> AsyncIterator[dict]:
    progress = ChoiceProgress(request.n, request.num_prompts)
    num_choices = len(progress.finished)
    offsets = [TextOffsets() for _ in range(num_choices)]  # per choice: text_offset carries on across its chunks
    echoed = [False] * num_choices
    # Echoed log-probabilities come with the first piece of each prompt's first
    # completion; that prompt's other completions wait for it.
    waits_for_prompt = request.echo and request.wants_logprobs
    waiting: list[GenerateOutput] = []
    async for piece in stream:
        progress.note(piece)
        ready, waiting = _ready_pieces([*waiting, piece], progress, waits_for_prompt)
        for ready_piece in ready:
            for chunk in _completion_piece_chunks(request, ready_piece, strings, progress, offsets, echoed):
                yield chunk
        if progress.all_finished:
            break
    if waiting:
        raise RuntimeError("the server returned no prompt log-probabilities for an echo request")
    if progress.all_finished and request.include_usage:
        yield progress.usage_chunk(request, "text_completion")


def _ready_pieces(
    pieces: list[GenerateOutput], progress: ChoiceProgress, waits_for_prompt: bool
) -> tuple[list[GenerateOutput], list[GenerateOutput]]:
    """``(ready, waiting)``: a piece waits while its prompt's log-probabilities, which an
    echo shows first, have not come; kept in order, its index's later pieces wait behind it."""
    if not waits_for_prompt:
        return pieces, []
    ready, waiting = [], []
    for piece in pieces:
        has_prompt = progress.prompt_of(piece.index).logprobs is not None
        (ready if has_prompt else waiting).append(piece)
    return ready, waiting


def _completion_piece_chunks(
    request: OpenAIRequest,
    piece: GenerateOutput,
    strings: TokenStrings | None,
    progress: ChoiceProgress,
    offsets: list[TextOffsets],
    echoed: list[bool],
) -> Iterator[dict]:
    index = piece.index
    if request.echo and not echoed[index]:
        echoed[index] = True
        logprobs = None
        if request.wants_logprobs:
            prompt_logprobs = progress.prompt_of(index).logprobs
            logprobs = completion_logprobs(strings, prompt_logprobs, request.num_top_logprobs, offsets[index])
        prompt = prompt_text(request, strings, index, progress.prompt_of(index).token_ids)
        yield completion_chunk(request, index, prompt, logprobs)
    logprobs = None
    if request.wants_logprobs and piece.token_ids:
        logprobs = completion_logprobs(strings, output_logprobs(piece), request.num_top_logprobs, offsets[index])
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
    progress = ChoiceProgress(request.n)  # a chat has one prompt
    choices = [ChatChoiceDeltas(request) for _ in range(request.n)]
    async for piece in stream:
        progress.note(piece)
        for chunk in _chat_piece_chunks(request, piece, strings, choices[piece.index]):
            yield chunk
        if progress.all_finished:
            if request.include_usage:
                yield progress.usage_chunk(request, "chat.completion.chunk")
            return


class ChatChoiceDeltas:
    """One streamed choice's text, sent as reasoning, content and tool-call deltas."""

    def __init__(self, request: OpenAIRequest):
        self.reasoning = request.reasoning.stream() if request.reasoning is not None else None
        self.tool_calls = ToolCallDeltas(request.tool_reader) if request.tool_reader is not None else None

    @property
    def has_calls(self) -> bool:
        return self.tool_calls is not None and self.tool_calls.has_calls

    def add(self, text: str, final: bool) -> list[dict]:
        """The message deltas of the choice's next piece of text."""
        deltas = []
        if self.reasoning is not None:
            split = self.reasoning.feed(text)
            if final:
                split = split + self.reasoning.finish()
            if split.reasoning:
                deltas.append({"reasoning_content": split.reasoning})
            text = split.content
        if self.tool_calls is not None:
            deltas.extend(self.tool_calls.add(text, final))
        elif text:
            deltas.append({"content": text})
        return deltas


def _chat_piece_chunks(
    request: OpenAIRequest,
    piece: GenerateOutput,
    strings: TokenStrings | None,
    choice: ChatChoiceDeltas,
) -> Iterator[dict]:
    logprobs = None
    if request.wants_logprobs and piece.token_ids:
        logprobs = chat_logprobs(strings, output_logprobs(piece), request.num_top_logprobs)
    deltas = choice.add(piece.text, piece.finished)
    if logprobs is not None and not deltas:
        deltas = [{"content": ""}]  # the log-probabilities of text still held back
    for position, delta in enumerate(deltas):
        yield chat_completion_chunk(request, piece.index, delta, logprobs if position == 0 else None)
    if piece.finished:
        finish_reason = finish_reason_with_calls(piece.finish_reason, choice.has_calls)
        yield chat_completion_chunk(request, piece.index, {}, None, finish_reason)
