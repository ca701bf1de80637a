"""Pages copied out of the pool and back: a float pool's values, and a quantized pool's values with their scales."""

import pytest
import torch

from tercet.model.kv_cache import PagedKVCache
from tercet.plugins.file_kv_storage import FileKVStorage
from tercet.scheduler.kv_tiers.page_codec import PageCheckError, decode_page, encode_page
from tercet.scheduler.kv_tiers.pool_pages import PoolPages

LAYERS, HEADS, DIM, PAGE = 2, 3, 16, 4
QUANTIZED = [torch.int8, torch.float8_e4m3fn]


def filled_pool(dtype: torch.dtype, num_pages: int = 6) -> PagedKVCache:
    """A pool whose every slot was written as the model writes K/V (quantized, for a quantized dtype)."""
    cache = PagedKVCache(LAYERS, HEADS, DIM, num_pages, PAGE, dtype, "cpu")
    generator = torch.Generator().manual_seed(3)
    slots = torch.arange(cache.num_slots)
    for layer in range(LAYERS):
        keys, values = (torch.randn(cache.num_slots, HEADS, DIM, generator=generator) * 4 for _ in range(2))
        cache.write(layer, slots, keys, values)
    return cache


def slot_bytes(cache: PagedKVCache, slots: list[int]) -> list[torch.Tensor]:
    """Every stored byte of ``slots``: values, and scales where there are."""
    index = torch.tensor(slots)
    return [tensor.index_select(0, index).view(torch.uint8) for tensor in cache.slot_tensors]


def page_slots(pages: list[int]) -> list[int]:
    return [page * PAGE + offset for page in pages for offset in range(PAGE)]


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_a_quantized_page_is_raw_bytes_with_its_scales(dtype):
    pages = PoolPages(filled_pool(dtype))
    assert pages.dtype == torch.uint8
    assert pages.page_shape == (2, LAYERS, PAGE, HEADS, DIM + 2)  # a byte a value, then a float16 scale
    # A page's bytes are the pool's bytes for its tokens, no more.
    assert pages.page_bytes == PAGE * pages.kv_cache.bytes_per_token
    assert pages.kv_cache.k_scales[0].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, *QUANTIZED])
def test_pages_copied_out_and_in_give_back_the_same_values_and_scales(dtype):
    source, target = filled_pool(dtype), PagedKVCache(LAYERS, HEADS, DIM, 6, PAGE, dtype, "cpu")
    pool_pages, target_pages = PoolPages(source), PoolPages(target)
    copied = pool_pages.split(pool_pages.copy_out([4, 1]))
    assert [page.shape for page in copied] == [pool_pages.page_shape] * 2
    target_pages.copy_in([0, 5], copied)
    assert all(torch.equal(mine, theirs)
               for mine, theirs in zip(slot_bytes(target, page_slots([0, 5])), slot_bytes(source, page_slots([4, 1]))))
    assert all(tensor.abs().sum() == 0 for tensor in slot_bytes(target, page_slots([1, 2, 3, 4])))


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_an_int8_or_fp8_page_through_the_file_tier_comes_back_identical(dtype, tmp_path):
    source, target = filled_pool(dtype), PagedKVCache(LAYERS, HEADS, DIM, 6, PAGE, dtype, "cpu")
    pool_pages = PoolPages(source)
    storage = FileKVStorage(tmp_path, budget_bytes=1 << 20)
    for key, page in zip(("a", "b"), pool_pages.split(pool_pages.copy_out([2, 3]))):
        storage.put(key, encode_page(key, page))
    read_back = [decode_page(storage.get(key), key, pool_pages.page_shape, pool_pages.dtype) for key in ("a", "b")]
    PoolPages(target).copy_in([1, 0], read_back)
    for mine, theirs in zip(slot_bytes(target, page_slots([1, 0])), slot_bytes(source, page_slots([2, 3]))):
        assert torch.equal(mine, theirs)
    # The values the kernel reads back are the ones it stored: scales and all.
    assert torch.equal(target.k_scales[1][4:8], source.k_scales[1][8:12])
    assert torch.equal(target.v_buffers[0][0:4].view(torch.uint8), source.v_buffers[0][12:16].view(torch.uint8))


def test_a_page_of_another_kv_dtype_is_refused():
    int8_pages, bfloat16_pages = PoolPages(filled_pool(torch.int8)), PoolPages(filled_pool(torch.bfloat16))
    data = encode_page("k", bfloat16_pages.split(bfloat16_pages.copy_out([0]))[0])
    with pytest.raises(PageCheckError, match="another page"):
        decode_page(data, "k", int8_pages.page_shape, int8_pages.dtype)
