"""What the HTTP layer hands the TokenizerManager, and what it gets back.

These stay in the main process; they never cross an IPC edge.
"""

from __future__ import annotations

from dataclasses import dataclass

from tercet.messages import FinishReason
from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class GenerateRequest:
    """One generation: exactly one of ``text`` and ``input_ids`` is set."""

    sampling_params: SamplingParams
    text: str | None = None
    input_ids: list[int] | None = None
    stream: bool = False
    rid: str | None = None


@dataclass(frozen=True)
class GenerateOutput:
    """A piece of one request's output.

    When streaming, ``text`` and ``token_ids`` are the delta since the previous
    piece; the last piece has ``finish_reason`` set. Without streaming, a single
    piece carries the whole output.
    """

    rid: str
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None
    prompt_tokens: int
    completion_tokens: int

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
