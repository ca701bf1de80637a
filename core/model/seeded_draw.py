"""Drawing one token per sampled row from a uniform that is a pure function of (seed, step).

Randomness comes from a counter-based hash computed in torch, not from a
global generator, so a request's token depends only on its own seed, step,
parameters and logits — never on which other requests share the batch.

A draw walks the cumulative weights of a row's kept tokens. Rows with top-k
or top-p need their candidates in descending order; sorting a whole
vocabulary is by far the dearest step on a CPU, so rows with top-k sort only
their ``k`` best (``topk``), only rows with top-p and no top-k sort the full
row, and rows with neither draw in vocabulary order without sorting. Which
way a row goes depends on its own parameters alone, which keeps it
reproducible whatever else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tercet.model.truncation import Truncation
from tercet.sampling_params import SamplingParams

_MASK_64 = (1 << 64) - 1


def _as_int64(value: int) -> int:
    """Two's-complement view of an unsigned 64-bit constant, as torch int64 holds it."""
    value &= _MASK_64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _as_int64(0x9E3779B97F4A7C15)
_MIX_1 = _as_int64(0xBF58476D1CE4E5B9)
_MIX_2 = _as_int64(0x94D049BB133111EB)
_UNIFORM_BITS = 24  # a float32 mantissa's worth


@dataclass(frozen=True)
class SeededDraw:
    """A group of rows of the batch drawn the same way."""

    rows: torch.Tensor | None  # [S] int64 rows in the batch; None when the group is the whole batch
    temperatures: torch.Tensor  # [S] float32
    seeds: torch.Tensor  # [S] int64
    steps: torch.Tensor  # [S] int64, index of the token being sampled in each request's output
    truncation: Truncation
    # How many best tokens to sort and draw from (None: the vocabulary, unsorted; 0: all, sorted).
    num_candidates: int | None

    @classmethod
    def from_rows(cls, rows: list[int], batch_size: int, params, seeds, steps, device) -> SeededDraw:
        chosen = [params[row] for row in rows]
        # One host-to-device copy for the integer columns, one for the temperatures.
        ints = torch.tensor(
            [rows, [_as_int64(seeds[row]) for row in rows], [steps[row] for row in rows]], dtype=torch.int64
        ).to(device, non_blocking=True)
        temperatures = torch.tensor([p.temperature for p in chosen], dtype=torch.float32)
        return cls(
            rows=None if len(rows) == batch_size else ints[0],
            temperatures=temperatures.to(device, non_blocking=True),
            seeds=ints[1],
            steps=ints[2],
            truncation=Truncation.from_params(chosen, device),
            num_candidates=_num_candidates(chosen),
        )

    def tokens_from(self, logits: torch.Tensor) -> torch.Tensor:
        """One drawn token ``[S]`` from the processed logits ``[B, V]`` of the whole batch."""
        rows = logits if self.rows is None else logits.index_select(0, self.rows)
        scaled = rows / self.temperatures[:, None]
        if self.num_candidates is None:
            candidates, candidate_tokens = scaled, None
        elif self.num_candidates == 0 or self.num_candidates >= scaled.shape[-1]:
            candidates, candidate_tokens = scaled.sort(dim=-1, descending=True)
        else:
            candidates, candidate_tokens = scaled.topk(self.num_candidates, dim=-1)
        weights = self.truncation.kept_weights(candidates)
        cdf = weights.cumsum(dim=-1)
        threshold = uniform_from_seed(self.seeds, self.steps) * cdf[:, -1]
        choice = torch.searchsorted(cdf, threshold[:, None], right=True)
        # Rounding can push the threshold onto the total; fall back to the last kept token.
        positions = torch.arange(weights.shape[-1], device=weights.device)
        last_kept = torch.where(weights > 0, positions, -1).amax(dim=-1, keepdim=True)
        # A row with no positive weight left (every logit -inf or NaN after the
        # edits) has nothing to draw from: take its best logit instead of index -1.
        nothing_kept = last_kept < 0
        choice = torch.where(nothing_kept, 0, torch.minimum(choice, last_kept))
        tokens = choice if candidate_tokens is None else candidate_tokens.gather(1, choice)
        return torch.where(nothing_kept, rows.argmax(dim=-1, keepdim=True), tokens).squeeze(1)


def draws_for(params: list[SamplingParams], seeds: list[int], steps: list[int], device) -> list[SeededDraw]:
    """The draws of a batch's non-greedy rows, grouped by how their candidates are ordered."""
    groups: dict[str, list[int]] = {}
    for row, p in enumerate(params):
        if p.temperature != 0:
            groups.setdefault(_candidate_order(p), []).append(row)
    return [SeededDraw.from_rows(rows, len(params), params, seeds, steps, device) for rows in groups.values()]


def _candidate_order(p: SamplingParams) -> str:
    if p.top_k > 0:
        return "k best"
    return "sorted" if p.top_p < 1.0 else "vocabulary"


def _num_candidates(params: list[SamplingParams]) -> int | None:
    order = _candidate_order(params[0])
    if order == "k best":
        # Weights past a row's own k are zero, so a wider prefix draws the same token.
        return max(p.top_k for p in params)
    return 0 if order == "sorted" else None


def uniform_from_seed(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """A uniform float32 in [0, 1) per row, a pure function of (seed, step)."""
    mixed = _splitmix64(_splitmix64(seeds) ^ steps)
    top_bits = _shift_right(mixed, 64 - _UNIFORM_BITS)
    return top_bits.to(torch.float32) / float(1 << _UNIFORM_BITS)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    # torch shifts int64 arithmetically; mask the sign bits back out for a logical shift.
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MIX_1
    x = (x ^ _shift_right(x, 27)) * _MIX_2
    return x ^ _shift_right(x, 31)
