"""Pages of K/V copied out of the pool (before they are freed) and into it (once allocated).

A page's values are one tensor ``[2 (K, V), num_layers, page_size, num_kv_heads, row]``.
In a float pool a row is the head's ``head_dim`` values, in the pool's dtype. In
a quantized pool (``[cache] kv_dtype`` int8 or fp8_e4m3) a row is bytes: the
head's stored values and then their float16 scale, so a page carries what the
kernel needs to read it back, and a page's bytes are the pool's bytes exactly.
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
        self.quantized = kv_cache.quantized
        # Bytes of a row's stored values (in a quantized pool, its scale follows them).
        self.value_bytes = kv_cache.head_dim * kv_cache.k_buffers[0].element_size()

    @property
    def page_shape(self) -> tuple[int, ...]:
        cache = self.kv_cache
        row = self.value_bytes + cache.k_scales[0].element_size() if self.quantized else cache.head_dim
        return (2, cache.num_layers, self.page_size, cache.num_kv_heads, row)

    @property
    def dtype(self) -> torch.dtype:
        return torch.uint8 if self.quantized else self.kv_cache.dtype

    @property
    def page_bytes(self) -> int:
        return torch.Size(self.page_shape).numel() * torch.empty((), dtype=self.dtype).element_size()

    def _slots(self, pages: list[int]) -> torch.Tensor:
        page_tensor = torch.tensor(pages, dtype=torch.int64)
        slots = (page_tensor[:, None] * self.page_size + torch.arange(self.page_size)).reshape(-1)
        return slots.to(self.kv_cache.device)

    def _kinds(self) -> tuple:
        """(values, scales) per layer of K and of V; scales None in a float pool."""
        cache = self.kv_cache
        return ((cache.k_buffers, cache.k_scales), (cache.v_buffers, cache.v_scales))

    def copy_out(self, pages: list[int]) -> torch.Tensor:
        """``[2, num_layers, len(pages) * page_size, heads, row]``: the pages' K/V, a copy of its own."""
        slots = self._slots(pages)
        return torch.stack([
            torch.stack([self._rows_of(buffers[layer], scales, layer, slots) for layer in range(len(buffers))])
            for buffers, scales in self._kinds()
        ])

    def _rows_of(self, buffer: torch.Tensor, scales, layer: int, slots: torch.Tensor) -> torch.Tensor:
        rows = buffer.index_select(0, slots)
        if not self.quantized:
            return rows
        # [n, heads, head_dim] values and [n, heads] float16 scales as [n, heads, value bytes + 2] bytes.
        scale_bytes = scales[layer].index_select(0, slots).unsqueeze(-1).view(torch.uint8)
        return torch.cat([rows.view(torch.uint8), scale_bytes], dim=-1)

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
        joined = torch.cat(page_values, dim=2).to(self.kv_cache.device)  # [2, layers, n * size, heads, row]
        for kind, (buffers, scales) in enumerate(self._kinds()):
            for layer, buffer in enumerate(buffers):
                self._write_rows(buffer, scales, layer, slots, joined[kind, layer])

    def _write_rows(self, buffer: torch.Tensor, scales, layer: int, slots: torch.Tensor, rows: torch.Tensor) -> None:
        if not self.quantized:
            buffer.index_copy_(0, slots, rows)
            return
        # As bytes: torch has no index_copy_ for float8 on the CPU.
        buffer.view(torch.uint8).index_copy_(0, slots, rows[..., :self.value_bytes].contiguous())
        scale_bytes = rows[..., self.value_bytes:].reshape(rows.shape[0], -1)  # [n, heads * 2]
        scales[layer].view(torch.uint8).index_copy_(0, slots, scale_bytes)
