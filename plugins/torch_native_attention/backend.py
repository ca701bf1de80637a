"""Attention over the paged KV cache with torch's ``scaled_dot_product_attention``.

Fully batched: the new tokens of every sequence are scattered into a padded
``[B, max_extend_len]`` query grid, each sequence's keys are gathered from the
cache into ``[B, max_seq_len]``, and one masked SDPA call covers the batch.
The gather indices, the mask and the scatter indices depend only on the batch,
so ``prepare`` builds them once per step and every layer reuses them. Gathers
and scatters use ``index_select``/``index_copy_`` on flat indices: on CPU they
are several times faster than advanced indexing, which dominated decode steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tercet.plugin_api import AttentionBackend, AttentionLayout
from tercet.plugin_api.model import ForwardBatch, PagedKVCache


class TorchNativeAttentionBackend(AttentionBackend):
    def __init__(self, layout: AttentionLayout):
        self.layout = layout
        self.num_heads = layout.num_heads
        self.num_kv_heads = layout.num_kv_heads
        self.head_dim = layout.head_dim
        self.key_slots: torch.Tensor | None = None  # [B * S], row-major over [B, S]
        self.mask: torch.Tensor | None = None  # [B, 1, E, S]
        self.padded_index: torch.Tensor | None = None  # [T] into the flattened [B * E] grid
        # On CPU the attention arithmetic runs in float32 whatever the model's
        # dtype: torch's CPU attention kernel is about 19x slower in bfloat16
        # than in float32 without AMX (decode, batch 32 over 272 keys: 8.2 ms
        # against 0.43 ms a layer, here), and the casts cost a fraction of that.
        self.compute_dtype = torch.float32 if layout.device.type == "cpu" else layout.dtype

    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        device = req_to_token.device
        batch_size, max_extend, max_seq = batch.batch_size, batch.max_extend_len, batch.max_seq_len
        self.key_slots = req_to_token[batch.req_pool_indices, :max_seq].reshape(-1)

        key_position = torch.arange(max_seq, device=device).view(1, 1, max_seq)
        query_offset = torch.arange(max_extend, device=device).view(1, max_extend, 1)
        # Padding query rows (offset >= extend_len) still see key 0, so softmax
        # never runs over an empty row and produces NaN; their output is dropped.
        is_visible = (key_position < batch.seq_lens.view(-1, 1, 1)) & (
            key_position <= batch.prefix_lens.view(-1, 1, 1) + query_offset
        )
        self.mask = is_visible.unsqueeze(1)

        if batch.is_decode_only:
            # One new token per sequence: the padded grid is the token order itself.
            self.padded_index = None
        else:
            sequence_of_token = torch.repeat_interleave(
                torch.arange(batch_size, device=device), batch.extend_lens, output_size=batch.num_tokens
            )
            offset_in_extend = batch.positions - batch.prefix_lens[sequence_of_token]
            self.padded_index = sequence_of_token * max_extend + offset_in_extend

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        kv_cache.write(layer_id, batch.out_cache_loc, k, v)
        batch_size, max_extend = batch.batch_size, batch.max_extend_len

        compute_dtype = self.compute_dtype
        if self.padded_index is None:
            padded_q = q.reshape(batch_size, 1, self.num_heads, self.head_dim).to(compute_dtype)
        else:
            padded_q = q.new_zeros(batch_size * max_extend, self.num_heads, self.head_dim, dtype=compute_dtype)
            padded_q.index_copy_(0, self.padded_index, q.to(compute_dtype))
            padded_q = padded_q.view(batch_size, max_extend, self.num_heads, self.head_dim)

        gathered = (batch_size, -1, self.num_kv_heads, self.head_dim)
        keys = kv_cache.k_buffers[layer_id].index_select(0, self.key_slots).view(gathered)  # [B, S, Hkv, D]
        values = kv_cache.v_buffers[layer_id].index_select(0, self.key_slots).view(gathered)
        out = F.scaled_dot_product_attention(
            padded_q.transpose(1, 2),
            keys.transpose(1, 2).to(compute_dtype),
            values.transpose(1, 2).to(compute_dtype),
            attn_mask=self.mask,
            scale=self.layout.scaling,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )  # [B, H, E, D]
        out = out.transpose(1, 2).reshape(batch_size * max_extend, self.num_heads * self.head_dim).to(q.dtype)
        if self.padded_index is None:
            return out
        return out.index_select(0, self.padded_index)
