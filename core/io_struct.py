"""What the HTTP layer hands the TokenizerManager, and what it gets back.

These stay in the main process; they never cross an IPC edge.
"""

from __future__ import annotations

from dataclasses import dataclass

from tercet.messages import FinishReason, TokenLogprobs
from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class GenerateRequest:
    """One generation: exactly one of ``text`` and ``input_ids`` is set."""

    sampling_params: SamplingParams
    text: str | None = None
    input_ids: list[int] | None = None
    stream: bool = False
    rid: str | None = None
    # Higher runs first under the "priority" scheduling policy.
    priority: int = 0
    # Who the request is for, for fair-share scheduling (OpenAI's "user", or a header).
    tenant: str | None = None


@dataclass(frozen=True)
class GenerateOutput:
    """A piece of one completion's output.

    When streaming, ``text``, ``token_ids`` and ``output_logprobs`` are the
    delta since the previous piece of the same ``index``; the last piece of each
    index has ``finish_reason`` set. Without streaming, one piece per index
    carries that completion's whole output. ``index`` counts the n completions
    of one request (0 when n == 1). ``prompt_logprobs`` and ``prompt_token_ids``
    come with the first piece of a request that asked for prompt log-probabilities.
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
