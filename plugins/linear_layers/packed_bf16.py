"""bfloat16 linear layers on CPU with their weights packed once for oneDNN.

A plain ``F.linear`` in bfloat16 on CPU hands oneDNN the weight in PyTorch's
layout, and oneDNN reorders it into its blocked layout on every call: for a
decode step's small batches that reorder costs as much as the multiplication
(measured here: about 2× for the 576-wide projections at batch 1, 3.8× for
the LM head at batch 32). Packing each weight once, when the model is loaded,
removes it. The results are the same oneDNN kernel's, bit for bit.

float32 is left alone: its packed path (MKL) rounds differently, and float32
is the precision whose greedy output must equal transformers token for token.

oneDNN packs bfloat16 only where the CPU computes in it (AVX-512 BW/VL/DQ or
AVX-NE-CONVERT on x86): elsewhere its reorder raises at load. So packing asks
torch whether this CPU has it, and tercet's instruction-set level whether the
level in use allows it (a machine forced to ``cpu_isa = "avx2"`` packs nothing,
as an AVX2 machine would).
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.plugin_api import level_in_use

# The features a level must promise for oneDNN's bfloat16 path (x86); other architectures' levels promise none.
ONEDNN_BFLOAT16_NEEDS = frozenset({"avx512bw", "avx512vl", "avx512dq"})


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    return (
        device.type == "cpu"
        and dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and ONEDNN_BFLOAT16_NEEDS <= level_in_use().needs
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


class PackedLinear(nn.Module):
    """``nn.Linear``'s forward over a weight packed for oneDNN (inference only)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # An opaque oneDNN tensor: kept as a plain attribute, not a parameter,
        # so state_dict and .to() never try to read or move it.
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
