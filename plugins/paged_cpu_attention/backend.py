"""The ``paged_cpu`` attention backend: decode steps on the in-place kernel, the rest as torch_native.

A step where every sequence feeds one token (decoding) runs the C kernel of
:mod:`.build`: it writes each new token's K/V and attends over the cache
where it lies. A step with prompt tokens in it (prefill, chunks, several
completions' first tokens) runs torch's ``scaled_dot_product_attention`` as
the ``torch_native`` backend does, which for many query tokens at once is a
matrix product the kernel would not beat, but whose blocking depends on the
batch's padded length: under ``model.deterministic`` those steps run the
kernel too, one decode row per new token.
"""

from __future__ import annotations

import ctypes

import torch

from tercet.plugin_api import AttentionBackend, AttentionLayout
from tercet.plugin_api.model import ForwardBatch, PagedKVCache
from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

# Keys one work item attends over before its result joins the others': fixed, so that a
# sequence's output does not depend on its batch-mates or the number of threads.
SPLIT_KEYS = 256
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}
INT64_P = ctypes.POINTER(ctypes.c_int64)


def _int64_pointer(tensor: torch.Tensor):
    return ctypes.cast(tensor.data_ptr(), INT64_P)


def _rows_of_heads(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ([T, heads, head_dim]) with contiguous heads; its token stride may be anything."""
    if tensor.stride(2) == 1 and tensor.stride(1) == tensor.shape[2]:
        return tensor
    return tensor.contiguous()


class PagedCpuAttentionBackend(AttentionBackend):
    def __init__(self, layout: AttentionLayout, kernel):
        self.layout = layout
        self.kernel = kernel
        self.prefill = TorchNativeAttentionBackend(layout)
        # This step's decode metadata, or None when the step has prompt tokens.
        self.decode: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        if batch.is_decode_only:
            self.decode = (
                req_to_token, batch.req_pool_indices.contiguous(), batch.seq_lens.contiguous(),
                batch.out_cache_loc.contiguous(),
            )
        elif self.layout.deterministic:
            # Every new token as its own decode row: its sequence's row, the keys up to and
            # including itself. The kernel writes all the new K/V before attending, so a
            # token sees the ones before it in this step too, and computes exactly as it
            # would alone (model.deterministic).
            rows = batch.req_pool_indices.repeat_interleave(batch.extend_lens, output_size=batch.num_tokens)
            self.decode = (req_to_token, rows, batch.positions + 1, batch.out_cache_loc.contiguous())
        else:
            self.decode = None
            self.prefill.prepare(batch, req_to_token)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        if self.decode is None:
            return self.prefill.forward(q, k, v, layer_id, batch, kv_cache)
        req_to_token, rows, seq_lens, out_cache_loc = self.decode
        q, k, v = _rows_of_heads(q), _rows_of_heads(k), _rows_of_heads(v)
        layout = self.layout
        out = torch.empty(q.shape[0], layout.num_heads * layout.head_dim, dtype=q.dtype)
        failed = self.kernel(
            q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), DTYPE_CODES[q.dtype],
            kv_cache.k_buffers[layer_id].data_ptr(), kv_cache.v_buffers[layer_id].data_ptr(),
            DTYPE_CODES[kv_cache.dtype], _int64_pointer(req_to_token), req_to_token.stride(0),
            _int64_pointer(rows), _int64_pointer(seq_lens), _int64_pointer(out_cache_loc),
            out.data_ptr(), q.shape[0], layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.scaling,
            SPLIT_KEYS,
        )
        if failed:
            raise RuntimeError(f"the paged decode kernel failed (code {failed})")
        return out
