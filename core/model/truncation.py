"""Which tokens a sampled row may still draw: top-k, then top-p (nucleus), then min-p.

Top-k and top-p work on the row's logits sorted in descending order, where
each keeps a prefix: top-k the first k, top-p the shortest prefix reaching
the mass top_p. Min-p keeps the tokens at least ``min_p`` times as likely as
the best, in any order. Top-p sees the distribution renormalised over the top-k survivors, as
transformers chains its warpers; min-p compares ratios to the best token,
which renormalising does not change. A filter no row of the batch uses is
``None`` and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tercet.sampling_params import SamplingParams

_NO_TOP_K = 2**62  # larger than any vocabulary: keeps every position


@dataclass(frozen=True)
class Truncation:
    top_ks: torch.Tensor | None  # [S] int64
    top_ps: torch.Tensor | None  # [S] float32
    min_ps: torch.Tensor | None  # [S] float32

    @classmethod
    def from_params(cls, params: list[SamplingParams], device) -> Truncation:
        """Filters for the rows of ``params`` (the rows that sample, in order)."""
        top_ks = [p.top_k if p.top_k > 0 else _NO_TOP_K for p in params]
        top_ps = [p.top_p for p in params]
        min_ps = [p.min_p for p in params]
        return cls(
            top_ks=_tensor_if(any(k != _NO_TOP_K for k in top_ks), top_ks, torch.int64, device),
            top_ps=_tensor_if(any(p < 1.0 for p in top_ps), top_ps, torch.float32, device),
            min_ps=_tensor_if(any(p > 0.0 for p in min_ps), min_ps, torch.float32, device),
        )

    def kept_weights(self, sorted_logits: torch.Tensor) -> torch.Tensor:
        """Probabilities of ``sorted_logits [S, C]`` with dropped tokens zeroed.

        Rows must be in descending order when top-k or top-p is set; ``C`` may
        be fewer than the vocabulary when every row's k fits in it (the
        softmax then renormalises over the k best, as top-k would). The
        weights are not renormalised after top-p and min-p: a draw scales its
        uniform by each row's total instead."""
        if self.top_ks is not None:
            positions = torch.arange(sorted_logits.shape[-1], device=sorted_logits.device)
            sorted_logits = sorted_logits.masked_fill(positions >= self.top_ks[:, None], float("-inf"))
        probs = torch.softmax(sorted_logits, dim=-1)
        if self.top_ps is not None:
            # A token stays while the mass before it is still short of top_p,
            # so the most likely token always stays; top_p = 1 keeps the whole
            # row even where rounding lets the running sum reach 1 early.
            mass_before = probs.cumsum(dim=-1) - probs
            is_kept = (mass_before < self.top_ps[:, None]) | (self.top_ps[:, None] >= 1.0)
            probs = probs * is_kept
        if self.min_ps is not None:
            best = probs.amax(dim=-1, keepdim=True)
            probs = probs * (probs >= self.min_ps[:, None] * best)
        return probs


def _tensor_if(is_used: bool, values: list, dtype: torch.dtype, device) -> torch.Tensor | None:
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True) if is_used else None
