"""What the HTTP layer hands the TokenizerManager, and what it gets back.

These stay in the main process; they never cross an IPC edge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tercet.ipc.messages import FinishReason, TokenLogprobs
from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class GenerateRequest:
    """One generation: exactly one of ``text``, ``input_ids`` and ``prompts`` is set.

    ``prompts`` makes it a batch (OpenAI's and SGLang's list prompts): several
    prompts, all strings or all token-id lists, sharing everything else. Each
    runs as if sent alone (:meth:`prompt_requests`); their completions are
    numbered in OpenAI's order, ``index = prompt × n + i``.

    ``sampling_params`` come validated: the HTTP routes build them through
    :func:`tercet.http.sampling_fields.checked_sampling_params`, and the
    TokenizerManager does not check them again. A caller building its own
    validates them first (:meth:`SamplingParams.validate`); what slips past
    is refused by the scheduler's intake, a 400 abort.
    """

    sampling_params: SamplingParams
    text: str | None = None
    input_ids: list[int] | None = None
    stream: bool = False
    rid: str | None = None
    # Higher runs first under the "priority" scheduling policy.
    priority: int = 0
    # Who the request is for, for fair-share scheduling (OpenAI's "user", or a header).
    tenant: str | None = None
    prompts: list[str] | list[list[int]] | None = None
    # The body field a batch's prompts came from: an error about one names it ("prompt[3]").
    prompt_field: str = "prompt"
    # The LoRA adapter to run with, by name (None: the base model); the scheduler refuses an unknown one.
    lora_name: str | None = None

    @property
    def is_batch(self) -> bool:
        return self.prompts is not None

    @property
    def num_prompts(self) -> int:
        return 1 if self.prompts is None else len(self.prompts)

    @property
    def num_completions(self) -> int:
        return self.num_prompts * self.sampling_params.n

    def prompt_at(self, index: int) -> str | list[int] | None:
        """Prompt ``index`` as sent: a string or token ids."""
        if self.prompts is not None:
            return self.prompts[index]
        return self.text if self.text is not None else self.input_ids

    def prompt_requests(self) -> list[GenerateRequest]:
        """One single-prompt request per prompt (this request itself when it is not a batch)."""
        if self.prompts is None:
            return [self]
        return [
            dataclasses.replace(self, prompts=None, **{"text" if isinstance(prompt, str) else "input_ids": prompt})
            for prompt in self.prompts
        ]


@dataclass(frozen=True)
class GenerateOutput:
    """A piece of one completion's output.

    When streaming, ``text``, ``token_ids`` and ``output_logprobs`` are the
    delta since the previous piece of the same ``index``; the last piece of each
    index has ``finish_reason`` set. Without streaming, one piece per index
    carries that completion's whole output. ``index`` numbers the request's
    completions, ``prompt × n + i`` (0 for one prompt and n == 1).
    ``prompt_logprobs`` and ``prompt_token_ids`` come with the first piece of
    each prompt of a request that asked for prompt log-probabilities.
    """

    rid: str
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None
    prompt_tokens: int
    completion_tokens: int
    index: int = 0
    output_logprobs: TokenLogprobs | None = None
    prompt_logprobs: TokenLogprobs | None = None
    prompt_token_ids: list[int] | None = None
    # Prompt tokens whose KV came from the prefix cache.
    cached_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class EmbeddingRequest:
    """Inputs to embed, all strings or all token-id lists; each gets its own vector, in order.

    ``is_list``: the inputs came as a list (``["a", "b"]``, ``[[1, 2]]``), so an
    error about one names it by position (``input[1]``); otherwise ``input``.
    """

    inputs: list[str] | list[list[int]]
    is_list: bool = False
    rid: str | None = None

    def input_name(self, index: int) -> str:
        return f"input[{index}]" if self.is_list else "input"


@dataclass(frozen=True)
class EmbeddingOutput:
    """One input's embedding: its vector as little-endian float32 bytes, in input order (``index``)."""

    rid: str
    index: int
    embedding: bytes
    prompt_tokens: int
    # Why the input was not embedded (an abort carrying its status code); None when it was.
    refusal: FinishReason | None = None
