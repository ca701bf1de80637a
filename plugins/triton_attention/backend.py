"""The ``triton`` attention backend: the kernels of :mod:`.kernels` over the paged KV cache.

Each layer writes its new tokens' K/V at their slots, then runs the decode
kernel (every sequence decoding one token) or the extend kernel (any step with
prompt tokens). ``prepare`` does nothing on the host: every kernel reads the
batch's own device tensors, so a decode step holds no host sync and can be
captured in a CUDA graph (``supports_cuda_graphs``).
"""

from __future__ import annotations

import torch

from tercet.plugin_api import AttentionBackend, AttentionLayout
from tercet.plugin_api.model import ForwardBatch, PagedKVCache
from tercet.plugins.triton_attention import kernels

# Block sizes: on a GPU, what fills a streaming multiprocessor's tiles; under the
# interpreter (a CPU) each program runs as numpy, where fewer, larger blocks are faster.
# Under the interpreter the matrix products run in float32: its bfloat16 tl.dot is wrong.
GPU_BLOCKS = {"block_m": 32, "block_n": 64, "dot_in_float32": False}
INTERPRETER_BLOCKS = {"block_m": 16, "block_n": 64, "dot_in_float32": True}
# Programs sharing one decoding sequence's keys: enough to fill a GPU at small batches.
GPU_DECODE_SPLITS = 8
INTERPRETER_DECODE_SPLITS = 2


def _heads_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ([T, heads, head_dim]) with a unit stride over head_dim (the kernels' one assumption)."""
    return tensor if tensor.stride(2) == 1 else tensor.contiguous()


class TritonAttentionBackend(AttentionBackend):
    supports_cuda_graphs = True

    def __init__(self, layout: AttentionLayout):
        self.layout = layout
        on_gpu = layout.device.type != "cpu"
        self.blocks = GPU_BLOCKS if on_gpu else INTERPRETER_BLOCKS
        self.num_decode_splits = GPU_DECODE_SPLITS if on_gpu else INTERPRETER_DECODE_SPLITS
        self.req_to_token: torch.Tensor | None = None

    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        self.req_to_token = req_to_token

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        kv_cache.write(layer_id, batch.out_cache_loc, k, v)
        layout = self.layout
        q = _heads_contiguous(q)
        out = torch.empty(q.shape[0], layout.num_heads * layout.head_dim, dtype=q.dtype, device=q.device)
        k_cache, v_cache = kv_cache.k_buffers[layer_id], kv_cache.v_buffers[layer_id]
        if batch.is_decode_only:
            kernels.decode_attention(
                q, k_cache, v_cache, self.req_to_token, batch.req_pool_indices, batch.seq_lens, out,
                layout.scaling, num_splits=self.num_decode_splits, block_n=self.blocks["block_n"],
            )
        else:
            kernels.extend_attention(
                q, k_cache, v_cache, self.req_to_token, batch.req_pool_indices, batch.prefix_lens,
                batch.extend_lens, batch.extend_start_loc, batch.max_extend_len, out, layout.scaling,
                **self.blocks,
            )
        return out
