"""The decoder layers on torch's ops, one after the other: the layer as :mod:`tercet.model.llama` writes it.

The reference the other runners (:mod:`tercet.model.layer_runner`) are held
to, and what runs wherever they do not: float32 on torch's ops, CUDA, and
``model.native_kernels = false``.
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.model.attention import AttentionBackend
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PagedKVCache
from tercet.model.rotary import RotaryEmbedding


class TorchLayers:
    """``layers`` (the model's :class:`tercet.model.llama.LlamaDecoderLayer` list) over one attention
    backend and KV cache, rotating from ``rotary``'s tables."""

    def __init__(self, layers: nn.ModuleList, rotary: RotaryEmbedding, backend: AttentionBackend,
                 kv_cache: PagedKVCache):
        self.layers = layers
        self.rotary = rotary
        self.backend = backend
        self.kv_cache = kv_cache

    def run(self, hidden: torch.Tensor, batch: ForwardBatch, native_lora: bool = False) -> torch.Tensor:
        cos, signed_sin = self.rotary.cos_sin(batch.positions)
        for layer in self.layers:
            hidden = layer(hidden, cos, signed_sin, batch, self.backend, self.kv_cache)
        return hidden
