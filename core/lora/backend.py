"""The contract of a LoRA backend plugin: add each segment's LoRA delta to a layer's output.

A step's rows are grouped in segments of consecutive rows that share one
adapter (the scheduler orders a batch by adapter, so a batch of k adapters has
about k segments; rows of the base model are in none). For every projection
an adapter adapts, the backend gets the base layer's output, already computed
by whatever linear method runs it (dense, int8, GGUF blocks), the layer's
input, and the segments; it adds, in place, for each segment and each part::

    output[start:stop, column:column + out] += (x[start:stop] @ lora_a.T)[:, rank_start:rank_stop] @ part.lora_b.T

``lora_a`` stacks the A matrices of every part of a fused projection (q, k
and v share one input), so a backend shrinks the rows once per segment; the
scale (``lora_alpha / r``) is already folded into each ``lora_b``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LoraPart:
    """One adapted part of a projection (q of the fused q/k/v, say)."""

    lora_b: torch.Tensor  # [out, rank], scale folded in, in the model's dtype and device
    column: int  # the part's first column in the projection's output
    rank_start: int  # the part's rows in the projection's stacked ``lora_a``
    rank_stop: int


@dataclass(frozen=True)
class LoraWeights:
    """An adapter's weights for one projection: the stacked A of its parts, and each part's B."""

    lora_a: torch.Tensor  # [sum of the parts' ranks, in]
    parts: tuple[LoraPart, ...]


@dataclass(frozen=True)
class LoraSegment:
    """Rows ``[start, stop)`` of the step, all of one adapter, and its weights for the projection."""

    start: int
    stop: int
    weights: LoraWeights


class LoraBackend(abc.ABC):
    """Adds LoRA deltas; one instance serves every projection of the model."""

    # True where the backend adds exactly the sums above in the model's dtype, as the model's
    # one-call C runner (tercet.model.native_layers) does: that runner may then add them
    # itself, and a step with adapters keeps the one-call path.
    native_equivalent = False

    @abc.abstractmethod
    def add_deltas(self, output: torch.Tensor, x: torch.Tensor, segments: Sequence[LoraSegment]) -> None:
        """Add each segment's delta to ``output`` (``[T, out]``) in place; ``x`` is the layer's input ``[T, in]``."""
