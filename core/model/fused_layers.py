"""The decoder layers called from Python, their norms, SiLU·mul and rotary as C calls.

The Llama layer of :mod:`tercet.model.llama` with three of its steps on
:class:`tercet.model.fused_ops.CpuFusedOps` (bfloat16 on a CPU): each RMSNorm
with the residual add before it, SiLU·mul, and rotary in place from the tables
by position. The projections and attention are the model's own modules, so a
LoRA adapter's wrapped projections and tensor parallelism's all-reduces are as
in the torch form. This is one of the layer's three copies (llama.py says which
and how they are held equal); :file:`native_layers.c` runs these same C
functions in this same order.
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.model.attention import AttentionBackend
from tercet.model.forward_batch import ForwardBatch
from tercet.model.fused_ops import CpuFusedOps
from tercet.model.kv_cache import PagedKVCache
from tercet.model.llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP
from tercet.model.rotary import RotaryEmbedding


class FusedCpuLayers:
    """``layers`` over one attention backend and KV cache, their fused steps on ``ops``."""

    def __init__(self, layers: nn.ModuleList, rotary: RotaryEmbedding, ops: CpuFusedOps, backend: AttentionBackend,
                 kv_cache: PagedKVCache):
        self.layers = layers
        self.rotary = rotary
        self.ops = ops
        self.backend = backend
        self.kv_cache = kv_cache

    def run(self, hidden: torch.Tensor, batch: ForwardBatch, native_lora: bool = False) -> torch.Tensor:
        for layer in self.layers:
            hidden = self.layer(layer, hidden, batch)
        return hidden

    def layer(self, layer: LlamaDecoderLayer, hidden: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        # The residual stream is updated in place: ``hidden`` is this step's own tensor
        # (the embedding's output, then each layer's).
        first, second = layer.input_layernorm, layer.post_attention_layernorm
        attended = self.attention(layer.self_attn, self.ops.rms_norm(hidden, first.weight, first.eps), batch)
        normed = self.ops.rms_norm(hidden, second.weight, second.eps, addend=attended)
        return hidden.add_(self.mlp(layer.mlp, normed))

    def attention(self, attention: LlamaAttention, normed: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        qkv = attention.qkv_proj(normed)
        self.ops.rotary_(qkv, attention.rotated_heads, attention.head_dim, batch.positions, self.rotary.cos_table,
                         self.rotary.signed_sin_table)
        q, k = attention.split_qk(attention.qk_heads(qkv))
        return attention.attend(q, k, qkv, batch, self.backend, self.kv_cache)

    def mlp(self, mlp: LlamaMLP, normed: torch.Tensor) -> torch.Tensor:
        return mlp.tp.all_reduce(mlp.down_proj(self.ops.silu_mul(mlp.gate_up_proj(normed))))
