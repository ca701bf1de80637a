"""The ``flashinfer`` attention backend: one FlashInfer paged-prefill plan per step, run by every layer.

tercet's cache is a slot per token (``[num_slots, num_kv_heads, head_dim]``),
which is FlashInfer's NHD paged layout with pages of one token: a sequence's
"pages" are its slots, read from the request → slot table, and every last
page is full. The paged-prefill kernel serves decode rows too (one query
each), so one wrapper covers every step; FlashInfer's causal mask is aligned
to each sequence's last key, which is what a prefix followed by new tokens
needs. ``prepare`` plans (host work, once per step); ``forward`` writes the
new K/V and runs the plan.
"""

from __future__ import annotations

import torch

from tercet.plugin_api import AttentionBackend, AttentionLayout
from tercet.plugin_api.model import ForwardBatch, PagedKVCache

WORKSPACE_BYTES = 128 * 1024 * 1024


class FlashInferAttentionBackend(AttentionBackend):
    supports_cuda_graphs = False

    def __init__(self, layout: AttentionLayout):
        import flashinfer

        self.layout = layout
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=layout.device)
        self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")

    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        device, layout = req_to_token.device, self.layout
        key_positions = torch.arange(batch.max_seq_len, device=device)
        rows = req_to_token[batch.req_pool_indices, : batch.max_seq_len]
        slots = rows[key_positions[None, :] < batch.seq_lens[:, None]].to(torch.int32)
        zero = torch.zeros(1, dtype=torch.int32, device=device)
        query_indptr = torch.cat([zero, torch.cumsum(batch.extend_lens, 0).to(torch.int32)])
        key_indptr = torch.cat([zero, torch.cumsum(batch.seq_lens, 0).to(torch.int32)])
        last_page_lens = torch.ones(batch.batch_size, dtype=torch.int32, device=device)
        self.wrapper.plan(
            query_indptr, key_indptr, slots, last_page_lens, layout.num_heads, layout.num_kv_heads,
            layout.head_dim, 1, causal=True, sm_scale=layout.scaling, q_data_type=layout.dtype,
            kv_data_type=layout.dtype,
        )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        kv_cache.write(layer_id, batch.out_cache_loc, k, v)
        pages = (kv_cache.k_buffers[layer_id].unsqueeze(1), kv_cache.v_buffers[layer_id].unsqueeze(1))
        out = self.wrapper.run(q.contiguous(), pages)
        return out.reshape(q.shape[0], self.layout.num_heads * self.layout.head_dim)
