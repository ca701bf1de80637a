"""The ``flashinfer`` attention backend: one FlashInfer paged-prefill plan per step, run by every layer.

tercet's cache is a slot per token (``[num_slots, num_kv_heads, head_dim]``),
which is FlashInfer's NHD paged layout with pages of one token: a sequence's
"pages" are its slots, read from the request → slot table, and every last
page is full. The paged-prefill kernel serves decode rows too (one query
each), so one wrapper covers every step; FlashInfer's causal mask is aligned
to each sequence's last key, which is what a prefix followed by new tokens
needs. ``prepare`` plans (host work, once per step, from the batch's host
lengths: no wait on the device); ``forward`` writes the new K/V and runs the
plan. FlashInfer's kernels take float16 and bfloat16 only.
"""

from __future__ import annotations

from itertools import accumulate

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
        layout = self.layout
        # FlashInfer plans on the host: lengths it is given on the device it would copy back,
        # waiting for the device. The batch's host lengths cost nothing.
        self.wrapper.plan(
            host_indptr(batch.host_extend_lens), host_indptr(batch.host_seq_lens), sequence_slots(batch, req_to_token),
            torch.ones(batch.batch_size, dtype=torch.int32), layout.num_heads, layout.num_kv_heads, layout.head_dim,
            1, causal=True, sm_scale=layout.scaling, q_data_type=layout.dtype, kv_data_type=layout.cache_dtype,
        )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        kv_cache.write(layer_id, batch.out_cache_loc, k, v)
        pages = (kv_cache.k_buffers[layer_id].unsqueeze(1), kv_cache.v_buffers[layer_id].unsqueeze(1))
        out = self.wrapper.run(q.contiguous(), pages)
        return out.reshape(q.shape[0], self.layout.num_heads * self.layout.head_dim)


def host_indptr(lengths: tuple[int, ...]) -> torch.Tensor:
    """``[0, l0, l0 + l1, ...]`` as a host int32 tensor: where each sequence's run starts and ends."""
    return torch.tensor([0, *accumulate(lengths)], dtype=torch.int32)


def sequence_slots(batch: ForwardBatch, req_to_token: torch.Tensor) -> torch.Tensor:
    """Every sequence's KV slots in position order, one after another (int32, on the table's device).

    Built from sizes the host knows, not with a boolean mask, whose result size the host
    would have to wait for the device to learn."""
    device, total = req_to_token.device, sum(batch.host_seq_lens)
    sequence_of_key = torch.repeat_interleave(
        torch.arange(batch.batch_size, device=device), batch.seq_lens, output_size=total
    )
    first_key = torch.cumsum(batch.seq_lens, 0) - batch.seq_lens
    positions = torch.arange(total, device=device) - first_key[sequence_of_key]
    return req_to_token[batch.req_pool_indices[sequence_of_key], positions].to(torch.int32)
