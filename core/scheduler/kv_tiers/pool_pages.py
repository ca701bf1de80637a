"""Pages of K/V copied out of the pool (before they are freed) and into it (once allocated).

A page's values are one tensor ``[2 (K, V), num_layers, page_size, num_kv_heads, head_dim]``.
Copying out is one index per layer and buffer, on the scheduler's thread (the
slots are reused the moment the pages are freed); turning the copy into bytes
is left to the caller's background thread.
"""

from __future__ import annotations

import torch


class PoolPages:
    def __init__(self, kv_cache):
        self.kv_cache = kv_cache
        self.page_size = kv_cache.page_size

    @property
    def page_shape(self) -> tuple[int, ...]:
        cache = self.kv_cache
        return (2, cache.num_layers, self.page_size, cache.num_kv_heads, cache.head_dim)

    @property
    def dtype(self) -> torch.dtype:
        return self.kv_cache.dtype

    @property
    def page_bytes(self) -> int:
        return torch.Size(self.page_shape).numel() * self.kv_cache.k_buffers[0].element_size()

    def _slots(self, pages: list[int]) -> torch.Tensor:
        page_tensor = torch.tensor(pages, dtype=torch.int64)
        slots = (page_tensor[:, None] * self.page_size + torch.arange(self.page_size)).reshape(-1)
        return slots.to(self.kv_cache.device)

    def copy_out(self, pages: list[int]) -> torch.Tensor:
        """``[2, num_layers, len(pages) * page_size, heads, dim]``: the pages' K/V, a copy of its own."""
        slots = self._slots(pages)
        cache = self.kv_cache
        return torch.stack([
            torch.stack([buffer.index_select(0, slots) for buffer in buffers])
            for buffers in (cache.k_buffers, cache.v_buffers)
        ])

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        """:meth:`copy_out`'s tensor as one ``page_shape`` tensor per page, on the CPU."""
        values = values.cpu()
        size = self.page_size
        return [values[:, :, index * size:(index + 1) * size] for index in range(values.shape[2] // size)]

    def copy_in(self, pages: list[int], page_values: list[torch.Tensor]) -> None:
        """Write each page's values (``page_shape`` tensors) into the pool at ``pages``."""
        if not pages:
            return
        slots = self._slots(pages)
        joined = torch.cat(page_values, dim=2).to(self.kv_cache.device)  # [2, layers, n * size, heads, dim]
        cache = self.kv_cache
        for kind, buffers in enumerate((cache.k_buffers, cache.v_buffers)):
            for layer, buffer in enumerate(buffers):
                buffer.index_copy_(0, slots, joined[kind, layer])
