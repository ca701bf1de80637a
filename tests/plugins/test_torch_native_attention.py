import subprocess
import sys

import pytest
import torch

from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PageAllocator, PagedKVCache, ReqToTokenPool
from tercet.plugin_host.manager import collect, create_plugin_manager
from tercet.plugins import torch_native_attention

HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE = 4, 2, 8, 4


def _backend(dtype=torch.float32) -> AttentionBackend:
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[torch_native_attention])
    factory = collect(plugin_manager, "register_attention_backends").get("torch_native")
    return factory(AttentionLayout(HEADS, KV_HEADS, HEAD_DIM, num_layers=1, device=torch.device("cpu"), dtype=dtype))


def test_registered_under_torch_native_through_the_plugin_hook():
    assert isinstance(_backend(), AttentionBackend)


def test_importing_the_plugin_does_not_import_torch():
    code = "import sys, tercet.plugins.torch_native_attention; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


class PagedSequences:
    """Sequences with random keys/values, stored in scattered pages of a cache."""

    def __init__(self, lengths: list[int], dtype=torch.float32):
        generator = torch.Generator().manual_seed(0)
        self.cache = PagedKVCache(1, KV_HEADS, HEAD_DIM, num_pages=32, page_size=PAGE_SIZE, dtype=dtype, device="cpu")
        self.pool = ReqToTokenPool(max_requests=4, max_context_len=64, device="cpu")
        allocator = PageAllocator(32)
        allocator.alloc(5)  # so sequences do not start at slot 0
        self.rows = []
        for length in lengths:
            row = self.pool.alloc()
            pages = allocator.alloc(-(-length // PAGE_SIZE))
            allocator.alloc(1)  # leave a gap: pages of a sequence need not be adjacent
            self.pool.assign_pages(row, 0, pages, PAGE_SIZE)
            self.rows.append(row)
        self.keys = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=generator) for n in lengths]
        self.values = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=generator) for n in lengths]
        self.queries = [torch.randn(n, HEADS, HEAD_DIM, generator=generator) for n in lengths]

    def cache_prefixes(self, prefix_lens: list[int]) -> None:
        for row, keys, values, prefix in zip(self.rows, self.keys, self.values, prefix_lens):
            slots = self.pool.table[row, :prefix]
            self.cache.write(0, slots, keys[:prefix], values[:prefix])

    def step(self, backend, prefix_lens: list[int], dtype=torch.float32) -> torch.Tensor:
        lengths = [len(k) for k in self.keys]
        new = [list(range(prefix, n)) for prefix, n in zip(prefix_lens, lengths)]
        batch = ForwardBatch.build(self.rows, prefix_lens, new, self.pool.table, "cpu")
        q = torch.cat([q[p:] for q, p in zip(self.queries, prefix_lens)]).to(dtype)
        k = torch.cat([k[p:] for k, p in zip(self.keys, prefix_lens)]).to(dtype)
        v = torch.cat([v[p:] for v, p in zip(self.values, prefix_lens)]).to(dtype)
        backend.prepare(batch, self.pool.table)
        return backend.forward(q, k, v, 0, batch, self.cache)

    def reference(self, prefix_lens: list[int]) -> torch.Tensor:
        """Plain causal attention, one sequence at a time, without any cache."""
        outputs = []
        for q, k, v, prefix in zip(self.queries, self.keys, self.values, prefix_lens):
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
            n = len(k)
            scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
            out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
            outputs.append(out[prefix:].reshape(n - prefix, HEADS * HEAD_DIM))
        return torch.cat(outputs)


@pytest.mark.parametrize(
    "lengths, prefix_lens",
    [
        ([6, 11, 3], [0, 0, 0]),  # prefills of different lengths
        ([9, 14, 5], [8, 13, 4]),  # decodes
        ([9, 13, 6], [8, 0, 5]),  # decodes mixed with a prefill
        ([12, 7], [5, 6]),  # a chunk continuing a cached prefix, next to a decode
    ],
)
def test_matches_plain_causal_attention(lengths, prefix_lens):
    sequences = PagedSequences(lengths)
    sequences.cache_prefixes(prefix_lens)
    out = sequences.step(_backend(), prefix_lens)
    assert out.shape == (sum(n - p for n, p in zip(lengths, prefix_lens)), HEADS * HEAD_DIM)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, sequences.reference(prefix_lens), atol=1e-5, rtol=1e-5)


def test_writes_the_new_keys_and_values_into_the_cache():
    sequences = PagedSequences([5, 3])
    sequences.step(_backend(), [0, 0])
    for row, keys, values in zip(sequences.rows, sequences.keys, sequences.values):
        slots = sequences.pool.table[row, : len(keys)]
        torch.testing.assert_close(sequences.cache.k_buffers[0][slots], keys)
        torch.testing.assert_close(sequences.cache.v_buffers[0][slots], values)


def test_runs_in_bfloat16():
    sequences = PagedSequences([9, 4], dtype=torch.bfloat16)
    sequences.cache_prefixes([8, 0])
    out = sequences.step(_backend(torch.bfloat16), [8, 0], dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), sequences.reference([8, 0]), atol=0.05, rtol=0.05)
