"""Consuming a TokenizerManager generation from an HTTP handler, shared by every route.

A generation is started by waiting for its first piece, so a bad or refused
request is answered with its own status before a streaming 200 goes out; a
client that leaves at any point gets its request aborted. A request with
``n > 1``, or a batch of prompts, yields the pieces of its completions
interleaved, each tagged with its ``index`` (``prompt × n + i``);
:class:`ChoiceAccumulator` joins one completion's pieces, :class:`PromptDetails`
keeps what the pieces say about each prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request

from tercet.frontend.io_struct import GenerateOutput, GenerateRequest
from tercet.http.errors import raise_if_refused
from tercet.http.sse import cancel_on_disconnect
from tercet.ipc.messages import TokenLogprobs


class GenerationStream:
    """The pieces of one generation, the first one already received.

    ``aclose`` closes the TokenizerManager's iterator, which aborts the request
    if it has not finished; closing twice is harmless. ``num_choices`` counts
    every completion, ``n`` those of each prompt (all of them, for one prompt).
    """

    def __init__(
        self, first: GenerateOutput, rest: AsyncIterator[GenerateOutput], num_choices: int = 1, n: int | None = None
    ):
        self._first: GenerateOutput | None = first
        self._rest = rest
        self.num_choices = num_choices
        self.n = num_choices if n is None else n

    @property
    def num_prompts(self) -> int:
        return self.num_choices // self.n

    def __aiter__(self) -> "GenerationStream":
        return self

    async def __anext__(self) -> GenerateOutput:
        if self._first is not None:
            piece, self._first = self._first, None
            return piece
        return await anext(self._rest)

    async def aclose(self) -> None:
        await _close(self._rest)


async def start_generation(
    outputs: AsyncIterator[GenerateOutput], num_choices: int = 1, n: int | None = None
) -> GenerationStream:
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
    return GenerationStream(first, outputs, num_choices, n)


async def open_generation(request: Request, tokenizer_manager, generate_request: GenerateRequest) -> GenerationStream:
    """Start a generation; if the client leaves before the first piece, it is aborted."""
    outputs = tokenizer_manager.generate(generate_request)
    started = start_generation(outputs, generate_request.num_completions, generate_request.sampling_params.n)
    return await cancel_on_disconnect(request.receive, started)


async def collect_generation(request: Request, stream: GenerationStream) -> list[GenerateOutput]:
    """Every completion's whole output, one per index in index order; a client
    that leaves meanwhile aborts the request."""
    try:
        return await cancel_on_disconnect(request.receive, _merge(stream))
    finally:
        await stream.aclose()


class ChoiceAccumulator:
    """The pieces of one completion (one ``index``) joined so far."""

    def __init__(self, index: int):
        self.index = index
        self.texts: list[str] = []
        self.token_ids: list[int] = []
        self.logprob_parts: list[TokenLogprobs | None] = []
        self.last: GenerateOutput | None = None

    @property
    def finished(self) -> bool:
        return self.last is not None and self.last.finished

    def add(self, piece: GenerateOutput) -> None:
        self.texts.append(piece.text)
        self.token_ids.extend(piece.token_ids)
        self.logprob_parts.append(piece.output_logprobs)
        self.last = piece

    def output(self, prompt: "PromptDetails | None" = None) -> GenerateOutput:
        """Everything so far as one piece, with the prompt's details when given."""
        if self.last is None:
            raise RuntimeError(f"completion {self.index} has no output yet")
        joined = dataclasses.replace(
            self.last,
            text="".join(self.texts),
            token_ids=list(self.token_ids),
            output_logprobs=TokenLogprobs.concat(self.logprob_parts),
        )
        if prompt is not None:
            joined = dataclasses.replace(joined, prompt_logprobs=prompt.logprobs, prompt_token_ids=prompt.token_ids)
        return joined


@dataclasses.dataclass
class PromptDetails:
    """What a prompt's pieces (the first of its first completion) say about the prompt."""

    logprobs: TokenLogprobs | None = None
    token_ids: list[int] | None = None

    def note(self, piece: GenerateOutput) -> None:
        if piece.prompt_logprobs is not None and self.logprobs is None:
            self.logprobs = piece.prompt_logprobs
        if piece.prompt_token_ids is not None and self.token_ids is None:
            self.token_ids = list(piece.prompt_token_ids)


def check_index(piece: GenerateOutput, num_choices: int) -> None:
    if not 0 <= piece.index < num_choices:
        raise RuntimeError(f"output for completion {piece.index} of a request with {num_choices} completions")


async def _merge(stream: GenerationStream) -> list[GenerateOutput]:
    choices = [ChoiceAccumulator(index) for index in range(stream.num_choices)]
    prompts = [PromptDetails() for _ in range(stream.num_prompts)]
    async for piece in stream:
        check_index(piece, len(choices))
        if piece.finished:
            raise_if_refused(piece.finish_reason)
        prompts[piece.index // stream.n].note(piece)
        choices[piece.index].add(piece)
        if all(choice.finished for choice in choices):
            return [choice.output(prompts[choice.index // stream.n]) for choice in choices]
    raise RuntimeError("the generation ended without a finish reason")


async def _close(outputs: AsyncIterator) -> None:
    aclose = getattr(outputs, "aclose", None)
    if aclose is not None:
        await aclose()
