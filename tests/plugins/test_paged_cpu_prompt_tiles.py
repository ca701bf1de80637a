"""The paged_cpu kernel's prompt tiles (prompt_tiles.h) give each row the bits of that row decoded alone.

A step with prompt tokens runs its rows 16 at a time, a row a vector lane; a
decoding step runs each row by itself. The tiles promise the same float
operations in the same order for every row, so each prompt row's output must be
the very bytes the decode path gives that row alone, over the cache the step
wrote. Random steps (prefixes across splits, chunks, single decode rows beside
them, GQA groups, head sizes, page sizes, float32 and bfloat16 activations, float32,
bfloat16, int8 and e4m3 caches) check it at every vector level this CPU runs. A kernel whose tiles fold the key products in another
order must fail the same check: the check can tell.
"""

from __future__ import annotations

import ctypes
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.native import build as native_build
from tercet.native.cpu import best_level, runnable_levels
from tercet.plugin_api.model import ForwardBatch
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.plugins.paged_cpu_attention.build import load_kernel, source_for
from tercet.testing.attention_cases import attention_case, copy_of

VECTOR_LEVELS = [level for level in runnable_levels() if level.name != "portable"]
pytestmark = pytest.mark.skipif(not VECTOR_LEVELS, reason="this CPU runs no vector level of the kernel")


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int16 if tensor.dtype == torch.bfloat16 else torch.int32)


def rows_unlike_decoding_alone(kernel, case) -> list[int]:
    """The step's rows whose output differs, in any bit, from that row decoded alone afterwards."""
    backend, cache = PagedCpuAttentionBackend(case.layout, kernel), copy_of(case.cache)
    together = case.run(backend, cache)
    batch = case.batch
    sequences = batch.req_pool_indices.repeat_interleave(batch.extend_lens).tolist()
    differing = []
    for row, (sequence, position) in enumerate(zip(sequences, batch.positions.tolist())):
        alone = ForwardBatch.build([sequence], [position], [[7]], case.table, "cpu")
        backend.prepare(alone, case.table)
        by_itself = backend.forward(case.q[row:row + 1], case.k[row:row + 1], case.v[row:row + 1], 1, alone, cache)
        if not torch.equal(_bits(by_itself), _bits(together[row:row + 1])):
            differing.append(row)
    return differing


SPANS = st.lists(st.tuples(st.integers(0, 600), st.integers(1, 40)), min_size=1, max_size=4)  # (prefix, new)
KV_DTYPES = [None, torch.bfloat16, torch.int8, torch.float8_e4m3fn]  # None: the activations' dtype


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    spans=SPANS,
    num_kv_heads=st.sampled_from([1, 3]),
    group=st.sampled_from([1, 3, 8]),
    head_dim=st.sampled_from([64, 128, 32]),
    page_size=st.sampled_from([1, 16]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    kv_dtype=st.sampled_from(KV_DTYPES),
)
def test_each_prompt_row_has_the_bits_of_the_row_decoded_alone(seed, spans, num_kv_heads, group, head_dim, page_size,
                                                                 dtype, kv_dtype):
    case = attention_case(seed, spans, num_kv_heads, group, head_dim, page_size, dtype, kv_dtype=kv_dtype)
    assert rows_unlike_decoding_alone(load_kernel(case.layout), case) == []


@pytest.mark.parametrize("level", VECTOR_LEVELS, ids=lambda level: level.name)
@pytest.mark.parametrize(("dtype", "kv_dtype"), [(torch.float32, None), (torch.bfloat16, None),
                                                 (torch.float32, torch.bfloat16), (torch.bfloat16, torch.int8),
                                                 (torch.bfloat16, torch.float8_e4m3fn)])
def test_at_every_vector_level(level, dtype, kv_dtype):
    case = attention_case(8, [(250, 30), (0, 17), (40, 1)], 3, 3, 64, 16, dtype, kv_dtype=kv_dtype)
    assert rows_unlike_decoding_alone(load_kernel(case.layout, level=level), case) == []


def test_a_long_prompt_over_several_splits_has_the_bits_of_decoding(tmp_path):
    # 300 tokens after a 280-token prefix: tiles that straddle the 256-key splits, and rows of one tile
    # with different numbers of splits.
    case = attention_case(11, [(280, 300)], 3, 3, 64, 16, torch.bfloat16)
    assert rows_unlike_decoding_alone(load_kernel(case.layout), case) == []


def _kernel_with_tiles_folded_otherwise(layout, folder: Path):
    """The kernel built from a copy of its source whose tiles add the key products' chains in another
    tree (neighbours first, where the decode path pairs lane l with l + 8 first)."""
    source = source_for(layout)
    copied = folder / "paged_cpu_attention"
    with resources.as_file(resources.files(source.package)) as package:
        shutil.copytree(package, copied)
    tiles = copied / "prompt_tiles.h"
    text = tiles.read_text()
    # Both the float32 folds and the bfloat16 dot products' (levels with AVX512-BF16, bfloat16 caches).
    planted, first_folds = re.subn(r"FOLD_ROUND\((chains_plus_8\w*), (key_chains\w*), 8,", r"FOLD_ROUND(\1, \2, 1,", text)
    planted, last_folds = re.subn(r"FOLD_ROUND\((key_scores\w*), (chains_plus_2\w*), 1,", r"FOLD_ROUND(\1, \2, 8,", planted)
    assert first_folds == last_folds == 2, "prompt_tiles.h no longer has the folds this test plants a change in"
    tiles.write_text(planted)
    library = folder / "planted.so"
    with resources.as_file(native_build._include_dir()) as include:
        native_build.compile_c(copied / source.file_name, Path(include), (*source.flags, *best_level().flags), library)
    function = ctypes.CDLL(str(library)).tercet_paged_decode_attention
    reference = load_kernel(layout)
    function.restype, function.argtypes = reference.restype, reference.argtypes
    return function


# float32 outputs (a bfloat16 output's rounding would hide most changes), from a float32 and a bfloat16 cache.
@pytest.mark.parametrize("kv_dtype", [None, torch.bfloat16])
def test_the_check_finds_a_planted_change_of_reduction_order(tmp_path, kv_dtype):
    case = attention_case(4, [(20, 40), (0, 33)], 3, 3, 64, 16, torch.float32, kv_dtype=kv_dtype)
    planted = _kernel_with_tiles_folded_otherwise(case.layout, tmp_path)
    assert len(rows_unlike_decoding_alone(planted, case)) > 30
    assert rows_unlike_decoding_alone(load_kernel(case.layout), case) == []
