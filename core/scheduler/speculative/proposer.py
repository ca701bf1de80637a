"""What a speculative-decoding proposer is given and must answer.

A proposer guesses the next few tokens of decoding requests; the scheduler
then checks every guess with the served model in one forward
(:mod:`tercet.scheduler.speculative.speculation`). It sees requests only through
:class:`DraftRequest`, a read-only view, never the scheduler's own objects.

A proposer that drafts with a model answers a :class:`DraftModel` instead: the
scheduler loads that model with its own small KV pool and drafts with it
(:mod:`tercet.scheduler.speculative.model_drafter`), so the plugin holds no model code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class DraftRequest:
    """One decoding request, as a proposer sees it."""

    rid: str
    # The prompt's tokens, then every output token so far (the newest last).
    token_ids: tuple[int, ...]
    num_prompt_tokens: int
    # The most draft tokens the scheduler will verify for it this step (at least 1).
    max_drafts: int

    @property
    def output_ids(self) -> tuple[int, ...]:
        return self.token_ids[self.num_prompt_tokens:]


class Proposer(ABC):
    """Guesses continuations; registered through ``register_speculative_proposers``."""

    @abstractmethod
    def propose(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        """Draft token ids for each request, in order: at most its ``max_drafts``, empty for no guess."""

    def forget(self, rid: str) -> None:
        """The request left (finished, aborted or retracted): drop what was kept for it."""


@dataclass(frozen=True)
class DraftModel:
    """A model to draft with, which a proposer factory may answer instead of a :class:`Proposer`:
    the scheduler loads it beside the served model, with a KV pool of its own
    (``[speculative] draft_max_total_tokens``), and drafts greedily with it, ``k`` steps
    batched over the requests. Its vocabulary must be the served model's."""

    # A Hugging Face checkpoint directory or a .gguf file.
    path: str
    # Its linear method, as ``[model] quantization`` names one ("auto": as the checkpoint ships).
    quantization: str = "auto"
    # Who asked for it, for messages: the proposer's name and the config key that chose the model.
    proposer: str = "draft_model"
    config_key: str = "speculative.draft_model"
    # Only worth it for a target whose linear layers are dense (the draft is the same weights, quantized).
    requires_dense_target: bool = False
