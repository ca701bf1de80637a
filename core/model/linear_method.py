"""The contract between the model and a linear method plugin.

A linear method owns two things for every linear layer of the model: how the
checkpoint's tensor becomes the layer's weights (kept as they were shipped,
quantized at load time, or dequantized) and how the layer's forward runs
(which kernel, on which device). The model only knows ``y = layer(x)``.

A checkpoint tensor reaches a method in one of two forms: a dense
``torch.Tensor`` (safetensors, or a GGUF F32/F16/BF16 tensor) or a
:class:`tercet.formats.gguf_blocks.BlockQuantized` (a GGUF Q4_0/Q4_1/Q8_0
tensor, still in its blocks). Fused projections (q/k/v, gate/up) arrive
already joined along the output dimension.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import torch
    from torch import nn

    from tercet.formats.gguf_blocks import BlockQuantized

    CheckpointWeight = Union[torch.Tensor, BlockQuantized]


@dataclass(frozen=True)
class LinearTarget:
    """Where a layer made by a method will run."""

    name: str  # the module's path in the model, for messages: "model.layers.3.mlp.down_proj"
    dtype: torch.dtype  # the activations' dtype: the layer takes and returns it
    device: torch.device
    # A quantized layer fed at least this many rows (tokens of a step) may run
    # on a dense copy of its weights, kept beside its codes; 0: never, no copy.
    dense_from_rows: int = 0
    # A method may run the layer on tercet's own C kernels where it has one for
    # this device and dtype (the GGUF block methods on CPU); False: torch's only.
    native_kernels: bool = True


class LinearMethod(abc.ABC):
    """Makes linear layers from checkpoint tensors."""

    # What ``/get_server_info`` and ``tercet config show`` call the weights this method makes.
    weight_format: str = ""

    @abc.abstractmethod
    def check(self, out_features: int, in_features: int, target: LinearTarget) -> None:
        """Raise :class:`tercet.errors.ConfigError` naming the problem when a
        ``[out_features, in_features]`` weight cannot be made into this method's layer."""

    @abc.abstractmethod
    def create(self, weight: CheckpointWeight, bias: torch.Tensor | None, target: LinearTarget) -> nn.Module:
        """The layer for ``weight`` (``[out_features, in_features]``): ``forward(x [T, in]) -> [T, out]``
        in ``target.dtype``. ``bias`` is dense or ``None``."""

    def accepts_as_is(self, weight: CheckpointWeight) -> bool:
        """Whether ``weight`` is already in this method's format (no conversion at load time)."""
        return False
