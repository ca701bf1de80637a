"""Edits to a batch's logits before a token is chosen: bias, penalties, min-tokens suppression.

Each stage is a list of ``(row, token)`` pairs built on the host once per step
and applied with one indexed tensor op, so the cost follows the number of
penalised tokens, not the vocabulary, and there is no Python loop over rows
of logits. A stage no request in the batch uses is ``None`` and costs nothing.

Order (as the sampler applies it): logit_bias is added, then the
repetition penalty (Hugging Face semantics, over prompt and output), then the
frequency and presence penalties (OpenAI semantics, over the output only),
then EOS and stop tokens are suppressed while a request is short of
``min_new_tokens``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class TokenPairs:
    """``(rows[k], token_ids[k])`` positions in ``[B, V]`` logits, with one value each where the edit needs one."""

    rows: torch.Tensor  # [N] int64
    token_ids: torch.Tensor  # [N] int64
    values: torch.Tensor | None  # [N] float32

    @classmethod
    def from_lists(
        cls, rows: list[int], token_ids: list[int], values: list[float] | None, device
    ) -> TokenPairs | None:
        if not rows:
            return None
        # One host-to-device copy for both index columns.
        indices = torch.tensor([rows, token_ids], dtype=torch.int64).to(device, non_blocking=True)
        values_t = None if values is None else torch.tensor(values, dtype=torch.float32).to(device, non_blocking=True)
        return cls(indices[0], indices[1], values_t)

    def add_to(self, logits: torch.Tensor) -> None:
        logits.index_put_((self.rows, self.token_ids), self.values, accumulate=True)

    def penalise_repetition_in(self, logits: torch.Tensor) -> None:
        """Divide positive logits by the penalty and multiply negative ones, as transformers does."""
        current = logits[self.rows, self.token_ids]
        penalised = torch.where(current > 0, current / self.values, current * self.values)
        logits.index_put_((self.rows, self.token_ids), penalised)

    def suppress_in(self, logits: torch.Tensor) -> None:
        logits[self.rows, self.token_ids] = float("-inf")


@dataclass(frozen=True)
class LogitEdits:
    logit_bias: TokenPairs | None = None
    repetition_penalty: TokenPairs | None = None
    output_penalties: TokenPairs | None = None  # frequency and presence, folded into one additive term
    min_tokens_suppression: TokenPairs | None = None

    @property
    def is_empty(self) -> bool:
        return (
            self.logit_bias is None
            and self.repetition_penalty is None
            and self.output_penalties is None
            and self.min_tokens_suppression is None
        )

    @classmethod
    def from_requests(
        cls,
        params: list[SamplingParams],
        steps: list[int],
        prompt_ids: list[list[int]] | None,
        output_ids: list[list[int]] | None,
        stop_token_ids_for_min_tokens: list[set[int]] | None,
        device,
    ) -> LogitEdits:
        return cls(
            logit_bias=_logit_bias_pairs(params, device),
            repetition_penalty=_repetition_pairs(params, prompt_ids, output_ids, device),
            output_penalties=_output_penalty_pairs(params, output_ids, device),
            min_tokens_suppression=_min_tokens_pairs(params, steps, stop_token_ids_for_min_tokens, device),
        )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed logits: a new tensor, or ``logits`` itself when there is nothing to edit.

        The caller's tensor is never written to, since log-probabilities are
        reported from the raw distribution."""
        if self.is_empty:
            return logits
        logits = logits.clone()
        if self.logit_bias is not None:
            self.logit_bias.add_to(logits)
        if self.repetition_penalty is not None:
            self.repetition_penalty.penalise_repetition_in(logits)
        if self.output_penalties is not None:
            self.output_penalties.add_to(logits)
        if self.min_tokens_suppression is not None:
            self.min_tokens_suppression.suppress_in(logits)
        return logits


def _logit_bias_pairs(params: list[SamplingParams], device) -> TokenPairs | None:
    rows, token_ids, values = [], [], []
    for row, p in enumerate(params):
        for token_id, bias in p.logit_bias.items():
            rows.append(row)
            token_ids.append(int(token_id))
            values.append(float(bias))
    return TokenPairs.from_lists(rows, token_ids, values, device)


def _repetition_pairs(params, prompt_ids, output_ids, device) -> TokenPairs | None:
    rows, token_ids, values = [], [], []
    for row, p in enumerate(params):
        if p.repetition_penalty == 1.0:
            continue
        # Unique tokens: a repeated index would be penalised from the same
        # original value anyway, and unique indices keep the write deterministic.
        seen = set(_history("prompt_ids", prompt_ids)[row]) | set(_history("output_ids", output_ids)[row])
        rows += [row] * len(seen)
        token_ids += seen
        values += [p.repetition_penalty] * len(seen)
    return TokenPairs.from_lists(rows, token_ids, values, device)


def _output_penalty_pairs(params, output_ids, device) -> TokenPairs | None:
    rows, token_ids, values = [], [], []
    for row, p in enumerate(params):
        if p.frequency_penalty == 0.0 and p.presence_penalty == 0.0:
            continue
        # The total per token is summed here, on the host, so the result does
        # not depend on the order a device adds duplicate indices in.
        for token_id, count in Counter(_history("output_ids", output_ids)[row]).items():
            rows.append(row)
            token_ids.append(token_id)
            values.append(-(p.frequency_penalty * count + p.presence_penalty))
    return TokenPairs.from_lists(rows, token_ids, values, device)


def _min_tokens_pairs(params, steps, stop_token_ids_for_min_tokens, device) -> TokenPairs | None:
    rows, token_ids = [], []
    for row, (p, step) in enumerate(zip(params, steps)):
        if step >= p.min_new_tokens:
            continue
        suppressed = _history("stop_token_ids_for_min_tokens", stop_token_ids_for_min_tokens)[row]
        rows += [row] * len(suppressed)
        token_ids += suppressed
    return TokenPairs.from_lists(rows, token_ids, None, device)


def _history(name: str, per_request: list | None) -> list:
    if per_request is None:
        raise ValueError(f"a request in the batch needs {name} for its sampling parameters, but none were given")
    return per_request
