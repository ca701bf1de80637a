"""Random steps over a paged KV cache, for checking an attention backend against another (tests).

A case is a cache filled with random keys and values, a request → slot table
whose rows hold pages scattered over the pool (as the scheduler leaves them),
a batch of sequences each with a cached prefix and some new tokens, and
q, k, v as strided views of one fused projection (as the model hands them
over). Two backends run the same case on copies of the cache: their outputs
should agree, and so should the caches they wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PagedKVCache, quantize_rows

# The layer every case runs: not 0, so a backend that ignores layer_id is caught.
CASE_LAYER = 1


@dataclass(frozen=True)
class AttentionCase:
    layout: AttentionLayout
    cache: PagedKVCache
    table: torch.Tensor
    batch: ForwardBatch
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor

    def run(self, backend: AttentionBackend, cache: PagedKVCache) -> torch.Tensor:
        backend.prepare(self.batch, self.table)
        return backend.forward(self.q, self.k, self.v, CASE_LAYER, self.batch, cache)


def attention_case(
    seed: int, spans: list[tuple[int, int]], num_kv_heads: int, group: int, head_dim: int, page_size: int,
    dtype: torch.dtype, device: torch.device | str = "cpu", kv_dtype: torch.dtype | None = None,
) -> AttentionCase:
    """A step whose sequences have ``spans`` of (cached prefix, new tokens); GQA group ``group``; the
    cache in ``kv_dtype`` (None: ``dtype``; a quantized one holds random rows quantized, with their scales)."""
    generator = torch.Generator().manual_seed(seed)
    device = torch.device(device)
    num_heads = num_kv_heads * group
    layout = AttentionLayout(num_heads, num_kv_heads, head_dim, num_layers=2, device=device, dtype=dtype,
                             kv_dtype=kv_dtype)
    seq_lens = [prefix + new for prefix, new in spans]
    pages_per_row = (max(seq_lens) + page_size - 1) // page_size
    num_pages = pages_per_row * len(seq_lens) + 3
    cache = PagedKVCache(2, num_kv_heads, head_dim, num_pages, page_size, layout.cache_dtype, device)
    _fill_randomly(cache, generator)
    pages = torch.randperm(num_pages, generator=generator)
    table = torch.zeros(len(seq_lens) + 2, pages_per_row * page_size + 5, dtype=torch.int64)
    rows = torch.randperm(table.shape[0], generator=generator)[: len(seq_lens)].tolist()
    for sequence, row in enumerate(rows):
        own = pages[sequence * pages_per_row:(sequence + 1) * pages_per_row]
        slots = (own.view(-1, 1) * page_size + torch.arange(page_size)).reshape(-1)
        table[row, : slots.numel()] = slots
    table = table.to(device)
    tokens = [[7] * new for _, new in spans]
    batch = ForwardBatch.build(rows, [prefix for prefix, _ in spans], tokens, table, device)
    fused = torch.randn(batch.num_tokens, num_heads + 2 * num_kv_heads, head_dim, generator=generator)
    q, k, v = fused.to(device=device, dtype=dtype).split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    return AttentionCase(layout, cache, table, batch, q, k, v)


def _fill_randomly(cache: PagedKVCache, generator: torch.Generator) -> None:
    """Random K/V in every slot (a quantized cache: random rows as the kernel would store them)."""
    for layer in range(cache.num_layers):
        for buffers, scales in ((cache.k_buffers, cache.k_scales), (cache.v_buffers, cache.v_scales)):
            values = torch.randn(buffers[layer].shape, generator=generator)
            if not cache.quantized:
                buffers[layer].copy_(values.to(cache.dtype))
                continue
            stored, row_scales = quantize_rows(values, cache.dtype)
            buffers[layer].copy_(stored.to(cache.device))
            scales[layer].copy_(row_scales.to(cache.device))


def copy_of(cache: PagedKVCache) -> PagedKVCache:
    copied = PagedKVCache(cache.num_layers, cache.num_kv_heads, cache.head_dim, cache.num_pages, cache.page_size,
                          cache.dtype, cache.device)
    for mine, theirs in zip(copied.slot_tensors, cache.slot_tensors):
        mine.copy_(theirs)
    return copied


def assert_same_cache(written: PagedKVCache, reference: PagedKVCache) -> None:
    for mine, theirs in zip(written.slot_tensors, reference.slot_tensors, strict=True):
        if mine.element_size() == 1:  # int8 or float8 (torch compares no float8 on the CPU): their bits
            mine, theirs = mine.view(torch.uint8), theirs.view(torch.uint8)
        assert torch.equal(mine, theirs)


def compare_backends(case: AttentionCase, backend: AttentionBackend, reference: AttentionBackend, **tolerance):
    """Run both on copies of the case's cache: the same output (within ``tolerance``), the same cache."""
    reference_cache, backend_cache = copy_of(case.cache), copy_of(case.cache)
    expected = case.run(reference, reference_cache)
    got = case.run(backend, backend_cache)
    torch.testing.assert_close(got, expected, **tolerance)
    assert_same_cache(backend_cache, reference_cache)
