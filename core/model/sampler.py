"""Batched next-token sampling: greedy, temperature and nucleus (top-p), reproducible per request.

Randomness comes from a counter-based hash of (seed, step) computed in torch,
not from a global generator, so a request's tokens depend only on its own
seed and logits — never on which other requests share the batch or in what
order. Every row is processed independently with no Python loop over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
class SamplingBatch:
    temperatures: torch.Tensor  # [B] float32; greedy rows hold 1.0 so division is harmless
    top_ps: torch.Tensor  # [B] float32
    is_greedy: torch.Tensor  # [B] bool
    seeds: torch.Tensor  # [B] int64
    steps: torch.Tensor  # [B] int64, index of the token being sampled in each request's output
    is_all_greedy: bool

    @classmethod
    def from_params(
        cls, params: list[SamplingParams], seeds: list[int], steps: list[int], device
    ) -> SamplingBatch:
        is_greedy = [p.temperature == 0 for p in params]
        floats = torch.tensor(
            [[1.0 if greedy else p.temperature for p, greedy in zip(params, is_greedy)], [p.top_p for p in params]],
            dtype=torch.float32,
        ).to(device, non_blocking=True)
        ints = torch.tensor([[_as_int64(s) for s in seeds], steps], dtype=torch.int64).to(device, non_blocking=True)
        return cls(
            temperatures=floats[0],
            top_ps=floats[1],
            is_greedy=torch.tensor(is_greedy, dtype=torch.bool).to(device, non_blocking=True),
            seeds=ints[0],
            steps=ints[1],
            is_all_greedy=all(is_greedy),
        )


def sample(logits: torch.Tensor, sampling_batch: SamplingBatch) -> torch.Tensor:
    """Next token of every row of ``logits [B, V]``, as ``[B]`` int64."""
    greedy_tokens = logits.argmax(dim=-1)
    if sampling_batch.is_all_greedy:
        return greedy_tokens

    probs = torch.softmax(logits.float() / sampling_batch.temperatures[:, None], dim=-1)
    sorted_probs, sorted_tokens = probs.sort(dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    # Keep the smallest prefix whose mass reaches top_p: a token stays if the
    # mass before it is still short of top_p (so the most likely always stays).
    is_kept = (cumulative - sorted_probs) < sampling_batch.top_ps[:, None]
    is_kept |= sampling_batch.top_ps[:, None] >= 1.0
    kept_cdf = (sorted_probs * is_kept).cumsum(dim=-1)

    threshold = uniform_from_seed(sampling_batch.seeds, sampling_batch.steps) * kept_cdf[:, -1]
    choice = torch.searchsorted(kept_cdf, threshold[:, None], right=True)
    # Rounding can push the threshold onto the total; fall back to the last kept token.
    choice = torch.minimum(choice, is_kept.sum(dim=-1, keepdim=True) - 1)
    sampled_tokens = sorted_tokens.gather(1, choice).squeeze(1)
    return torch.where(sampling_batch.is_greedy, greedy_tokens, sampled_tokens)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    # torch shifts int64 arithmetically; mask the sign bits back out for a logical shift.
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MIX_1
    x = (x ^ _shift_right(x, 27)) * _MIX_2
    return x ^ _shift_right(x, 31)


def uniform_from_seed(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """A uniform float32 in [0, 1) per row, a pure function of (seed, step)."""
    mixed = _splitmix64(_splitmix64(seeds) ^ steps)
    top_bits = _shift_right(mixed, 64 - _UNIFORM_BITS)
    return top_bits.to(torch.float32) / float(1 << _UNIFORM_BITS)
