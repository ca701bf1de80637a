"""The ``paged_cpu`` attention backend: every step's attention on the in-place C kernel.

The kernel of :mod:`.build` writes each new token's K/V and attends over the
cache where it lies. A decoding step is one row per sequence. A step with
prompt tokens in it (prefill, chunks, decode rows mixed in) is one row per
new token: its sequence's row, and the keys up to and including itself. The
kernel writes all the new K/V before it attends, so a prompt token sees the
ones before it in the same step. It runs a prompt's consecutive rows 16 at a
time (prompt_tiles.h: a row a vector lane, each key block widened once for
all of them), with each row's float operations those of the row decoded alone,
so each token is computed exactly as it would be alone, whatever its
batch-mates, its prompt's chunking or the prefix cache (what
``model.deterministic`` relies on).

An int8 or e4m3 cache (``cache.kv_dtype``) is read the same way, in place: the
kernel stores each new row quantized with its float16 scale (quantized_rows.h)
and widens each key and value row times its scale where a bfloat16 row is
widened, so a row's bits still do not depend on its batch-mates.

Measured figures are in docs/benchmarks.md ("Prompt attention").
"""

from __future__ import annotations

import ctypes

import torch

from tercet.plugin_api import AttentionBackend, AttentionLayout, NativeAttention
from tercet.plugin_api.model import ForwardBatch, PagedKVCache

# Keys one work item attends over before its result joins the others': fixed, so that a
# sequence's output does not depend on its batch-mates or the number of threads.
SPLIT_KEYS = 256
# The kernel's code of each dtype it takes (cache_dtypes.h): activations in the first two, a cache in
# any (int8 and e4m3 with a float16 scale a row beside them).
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2, torch.float8_e4m3fn: 3}
ACTIVATION_DTYPES = (torch.float32, torch.bfloat16)
INT64_P = ctypes.POINTER(ctypes.c_int64)


def _int64_pointer(tensor: torch.Tensor):
    return ctypes.cast(tensor.data_ptr(), INT64_P)


def scale_pointers(kv_cache: PagedKVCache, layer_id: int) -> tuple[int | None, int | None]:
    """The addresses of a quantized cache's K and V row scales of one layer (None, None for another cache)."""
    if kv_cache.k_scales is None:
        return None, None
    return kv_cache.k_scales[layer_id].data_ptr(), kv_cache.v_scales[layer_id].data_ptr()


def _rows_of_heads(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ([T, heads, head_dim]) with contiguous heads; its token stride may be anything."""
    if tensor.stride(2) == 1 and tensor.stride(1) == tensor.shape[2]:
        return tensor
    return tensor.contiguous()


class PagedCpuAttentionBackend(AttentionBackend):
    def __init__(self, layout: AttentionLayout, kernel):
        self.layout = layout
        self.kernel = kernel
        # This step's kernel rows: the table, each row's sequence, keys and new slot.
        self.decode: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        if batch.is_decode_only:
            self.decode = (
                req_to_token, batch.req_pool_indices.contiguous(), batch.seq_lens.contiguous(),
                batch.out_cache_loc.contiguous(),
            )
        else:
            # Every new token as its own decode row (see the module's text).
            rows = batch.req_pool_indices.repeat_interleave(batch.extend_lens, output_size=batch.num_tokens)
            self.decode = (req_to_token, rows, batch.positions + 1, batch.out_cache_loc.contiguous())

    def native_attention(self) -> NativeAttention:
        """The kernel for a caller in C (the model's layers in one call), reading :meth:`native_step`'s rows."""
        codes = tuple((str(dtype).removeprefix("torch."), code) for dtype, code in DTYPE_CODES.items())
        return NativeAttention(ctypes.cast(self.kernel, ctypes.c_void_p).value, SPLIT_KEYS, codes)

    def native_step(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """This step's kernel rows, as :meth:`prepare` left them: the table, each row's sequence, keys and slot."""
        return self.decode

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        req_to_token, rows, seq_lens, out_cache_loc = self.decode
        q, k, v = _rows_of_heads(q), _rows_of_heads(k), _rows_of_heads(v)
        layout = self.layout
        out = torch.empty(q.shape[0], layout.num_heads * layout.head_dim, dtype=q.dtype)
        failed = self.kernel(
            q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), DTYPE_CODES[q.dtype],
            kv_cache.k_buffers[layer_id].data_ptr(), kv_cache.v_buffers[layer_id].data_ptr(),
            *scale_pointers(kv_cache, layer_id), DTYPE_CODES[kv_cache.dtype], _int64_pointer(req_to_token),
            req_to_token.stride(0),
            _int64_pointer(rows), _int64_pointer(seq_lens), _int64_pointer(out_cache_loc),
            out.data_ptr(), q.shape[0], layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.scaling,
            SPLIT_KEYS,
        )
        if failed:
            raise RuntimeError(f"the paged decode kernel failed (code {failed})")
        return out
