"""A projection with LoRA: the base layer's output, plus the deltas of the step's adapters.

:class:`LoraLinear` wraps a base linear layer (whatever its linear method) and
keeps it: ``forward`` runs the base layer, then hands the output, the input and
this projection's segments of the step to the LoRA backend. A step with no
adapter in it runs the base layer alone, and offers the base layer's C matmul
to :mod:`tercet.model.native_layers`, so a model serving no adapter this step
keeps its one-call path.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from tercet.lora.backend import LoraBackend, LoraSegment, LoraWeights


class AdapterWeights(dict):
    """An adapter's :class:`LoraWeights` by projection key ``(layer, projection)``; ``native`` keeps
    the form the one-call C runner reads (:mod:`tercet.model.native_layers` makes it once), which
    lives and goes with the weights."""

    native = None


@dataclass(frozen=True)
class AdapterRun:
    """Rows ``[start, stop)`` of a step that all use one adapter's weights (by projection)."""

    start: int
    stop: int
    weights: dict  # projection key -> LoraWeights, for the projections the adapter adapts


class LoraStep:
    """The runs of the step being computed, shared by every :class:`LoraLinear` of a model."""

    def __init__(self, backend: LoraBackend):
        self.backend = backend
        self.runs: tuple[AdapterRun, ...] = ()


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Module, key: tuple[int, str], step: LoraStep):
        super().__init__()
        self.base = base
        self.key = key  # (layer, projection): "qkv", "o", "gate_up" or "down"
        self.step = step

    def forward(self, x):
        output = self.base(x)
        runs = self.step.runs
        if runs:
            segments = [LoraSegment(run.start, run.stop, weights) for run in runs
                        if (weights := run.weights.get(self.key)) is not None]
            if segments:
                self.step.backend.add_deltas(output, x, segments)
        return output

    def native_matmul(self):
        """The base layer's C matmul, for steps without adapters (None where it has none)."""
        offer = getattr(self.base, "native_matmul", None)
        return offer() if offer is not None else None


def weights_of_projection(parts: list[tuple[int, object, object]]) -> LoraWeights:
    """One projection's :class:`LoraWeights` from its adapted parts ``(column, lora_a, lora_b)``.

    A and B are held transposed (``lora_a`` and each ``lora_b`` are views of contiguous
    ``[in, rank]`` and ``[rank, out]`` tensors): both products then run along contiguous rows,
    for torch's ``x @ lora_a.t()`` as for the C runner, which reads them as they are."""
    import torch

    from tercet.lora.backend import LoraPart

    built, rank_start = [], 0
    for column, lora_a, lora_b in parts:
        built.append(LoraPart(lora_b.t().contiguous().t(), column, rank_start, rank_start + lora_a.shape[0]))
        rank_start += lora_a.shape[0]
    stacked = torch.cat([lora_a for _, lora_a, _ in parts])
    return LoraWeights(stacked.t().contiguous().t(), tuple(built))
