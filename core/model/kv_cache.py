"""Paged KV memory: the token slots, the pages that group them, and each request's slot table.

The KV pool is allocated once. A slot is one token's K and V in one layer;
``slot = page * page_size + offset``. The scheduler hands out whole pages
(``PageAllocator``) and records, per request, which slot holds each of its
token positions (``ReqToTokenPool``). Attention backends read that table to
find a sequence's keys; nothing needs the keys of a sequence to be contiguous.
"""

from __future__ import annotations

import torch


class PagedKVCache:
    """Per-layer K and V buffers of shape ``[num_pages * page_size, num_kv_heads, head_dim]``."""

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

    def write(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store this step's keys and values of one layer at their slots."""
        # index_copy_ rather than ``buffer[slots] = …``: the same result, several
        # times cheaper on CPU than advanced-index assignment.
        self.k_buffers[layer_id].index_copy_(0, slots, k.to(self.dtype))
        self.v_buffers[layer_id].index_copy_(0, slots, v.to(self.dtype))

    @property
    def num_bytes(self) -> int:
        per_buffer = self.num_slots * self.num_kv_heads * self.head_dim * self.k_buffers[0].element_size()
        return 2 * self.num_layers * per_buffer


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
