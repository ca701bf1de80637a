"""Paged KV memory: the token slots, the pages that group them, and each request's slot table.

The KV pool is allocated once. A slot is one token's K and V in one layer;
``slot = page * page_size + offset``. The scheduler hands out whole pages
(``PageAllocator``) and records, per request, which slot holds each of its
token positions (``ReqToTokenPool``). Attention backends read that table to
find a sequence's keys; nothing needs the keys of a sequence to be contiguous.
"""

from __future__ import annotations

import torch

# Cache dtypes stored quantized: each token's row of each KV head has a float16 scale beside it
# (``k_scales``/``v_scales``), and its values are ``round(x / scale)`` (int8, scale = absmax / 127) or
# ``x / scale`` in e4m3 (scale = absmax / 448). A scale per token and head makes a token's stored K/V
# depend on that token alone, never on its batch-mates; float16 rather than float32 scales keep the
# pool's gain near 2x (66 bytes a row of 64 against bfloat16's 128). A row is rotated first
# (rotate_rows), so that a key's few outsized channels do not coarsen the rounding of the others.
QUANTIZED_KV_DTYPES = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0}
SCALE_DTYPE = torch.float16


def rotation_block(head_dim: int) -> int:
    """The size of the rotation's blocks: the largest power of two dividing ``head_dim``."""
    return head_dim & -head_dim


def rotate_rows(values: torch.Tensor) -> torch.Tensor:
    """``H x`` of each row (float32, ``[..., head_dim]``): the unnormalized Walsh-Hadamard transform of
    each block of :func:`rotation_block` values, with the very additions of the attention kernel
    (quantized_rows.h). ``H H = n I``: ``rotate_rows(rotate_rows(x)) / n`` is ``x`` again."""
    head_dim = values.shape[-1]
    rows = values.float().reshape(-1, head_dim)
    half = 1
    while half < rotation_block(head_dim):
        pairs = rows.view(rows.shape[0], head_dim // (2 * half), 2, half)
        rows = torch.stack((pairs[:, :, 0] + pairs[:, :, 1], pairs[:, :, 0] - pairs[:, :, 1]), dim=2)
        rows = rows.reshape(-1, head_dim)
        half *= 2
    return rows.view(values.shape)


def quantize_rows(values: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` ([..., head_dim]) rotated (:func:`rotate_rows`) and stored as ``dtype``, with their
    float16 scales ([...]): what the attention kernel stores for a new token, bit for bit (the
    reference its tests compare against)."""
    largest = QUANTIZED_KV_DTYPES[dtype]
    values = rotate_rows(values)
    scales = (values.abs().amax(dim=-1) / largest).clamp(max=torch.finfo(SCALE_DTYPE).max).to(SCALE_DTYPE)
    widened = scales.float()
    inverse = torch.where(widened > 0, 1.0 / widened, torch.zeros_like(widened))
    scaled = (values * inverse.unsqueeze(-1)).clamp(-largest, largest)
    if dtype == torch.int8:
        return scaled.round().to(torch.int8), scales
    return scaled.to(dtype), scales


def dequantize_rows(stored: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float32 values that quantized rows stand for, rotated as they were stored."""
    return stored.float() * scales.float().unsqueeze(-1)


def unrotated_rows(stored: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float32 values that quantized rows stand for, in the model's own basis (for reading them back)."""
    values = dequantize_rows(stored, scales)
    return rotate_rows(values) / rotation_block(values.shape[-1])


class PagedKVCache:
    """Per-layer K and V buffers of shape ``[num_pages * page_size, num_kv_heads, head_dim]``; with a
    quantized ``dtype`` (:data:`QUANTIZED_KV_DTYPES`) also their scales, ``[num_pages * page_size,
    num_kv_heads]`` float16 per layer (else ``k_scales`` and ``v_scales`` are None)."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (self.num_slots, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.k_scales = self.v_scales = None
        if self.quantized:
            self.k_scales = [torch.zeros(shape[:2], dtype=SCALE_DTYPE, device=self.device) for _ in range(num_layers)]
            self.v_scales = [torch.zeros(shape[:2], dtype=SCALE_DTYPE, device=self.device) for _ in range(num_layers)]

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED_KV_DTYPES

    @property
    def slot_tensors(self) -> list[torch.Tensor]:
        """Every tensor indexed by slot: each layer's K and V and, when quantized, their scales. What a
        copy of some slots' K/V into others must copy, for the copy to read back the same."""
        scales = [*self.k_scales, *self.v_scales] if self.quantized else []
        return [*self.k_buffers, *self.v_buffers, *scales]

    def write(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store this step's keys and values of one layer at their slots."""
        # index_copy_ rather than ``buffer[slots] = …``: the same result, several
        # times cheaper on CPU than advanced-index assignment.
        if not self.quantized:
            self.k_buffers[layer_id].index_copy_(0, slots, k.to(self.dtype))
            self.v_buffers[layer_id].index_copy_(0, slots, v.to(self.dtype))
            return
        for values, buffers, scales in ((k, self.k_buffers, self.k_scales), (v, self.v_buffers, self.v_scales)):
            stored, row_scales = quantize_rows(values, self.dtype)
            # As bytes: torch has no index_copy_ for float8 on the CPU.
            buffers[layer_id].view(torch.uint8).index_copy_(0, slots, stored.view(torch.uint8))
            scales[layer_id].index_copy_(0, slots, row_scales)

    @property
    def num_bytes(self) -> int:
        return self.num_slots * self.bytes_per_token

    @property
    def bytes_per_token(self) -> int:
        """The bytes one token takes in every layer's K and V (their scales too)."""
        return kv_bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype)


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """The bytes of one token's K and V over ``num_layers`` layers in a ``dtype`` cache, scales included."""
    row = head_dim * torch.tensor([], dtype=dtype).element_size()
    if dtype in QUANTIZED_KV_DTYPES:
        row += torch.tensor([], dtype=SCALE_DTYPE).element_size()
    return 2 * num_layers * num_kv_heads * row


class PageAllocator:
    """A free list of page numbers; all-or-nothing allocation keeps admission simple."""

    def __init__(self, num_pages: int):
        self.num_total = num_pages
        # Pop from the end so low page numbers are handed out first.
        self._free_pages = list(range(num_pages - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free_pages)

    def alloc(self, num_pages: int) -> list[int] | None:
        if num_pages > len(self._free_pages):
            return None
        if num_pages <= 0:
            return []
        pages = self._free_pages[-num_pages:]
        del self._free_pages[-num_pages:]
        pages.reverse()
        return pages

    def free(self, pages: list[int]) -> None:
        self._free_pages.extend(pages)


class ReqToTokenPool:
    """Rows of the request → slot table; ``table[row, position]`` is that token's KV slot."""

    def __init__(self, max_requests: int, max_context_len: int, device: torch.device | str):
        self.max_requests = max_requests
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.table = torch.zeros((max_requests, max_context_len), dtype=torch.int64, device=self.device)
        self._free_rows = list(range(max_requests - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        self._free_rows.append(row)

    def assign_pages(self, row: int, first_page_index: int, pages: list[int], page_size: int) -> None:
        """Map the row's page indices ``first_page_index, first_page_index+1, …`` to ``pages``.

        One tensor write for all pages, so growing a long prompt costs no Python loop.
        """
        if not pages:
            return
        start = first_page_index * page_size
        end = min(start + len(pages) * page_size, self.max_context_len)
        page_tensor = torch.tensor(pages, dtype=torch.int64)
        slots = (page_tensor[:, None] * page_size + torch.arange(page_size)).reshape(-1)
        self.table[row, start:end] = slots[: end - start].to(self.device, non_blocking=True)
