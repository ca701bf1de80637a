import pytest
import torch

from tercet.model.kv_cache import (
    QUANTIZED_KV_DTYPES, SCALE_DTYPE, PageAllocator, PagedKVCache, ReqToTokenPool, dequantize_rows,
    kv_bytes_per_token, quantize_rows, rotate_rows, rotation_block, unrotated_rows,
)


def test_page_allocator_hands_out_distinct_pages_until_empty():
    allocator = PageAllocator(5)
    first = allocator.alloc(3)
    second = allocator.alloc(2)
    assert sorted(first + second) == [0, 1, 2, 3, 4]
    assert allocator.num_free == 0 and allocator.num_total == 5


def test_page_allocator_allocates_nothing_when_short():
    allocator = PageAllocator(4)
    allocator.alloc(3)
    assert allocator.alloc(2) is None
    assert allocator.num_free == 1


def test_freed_pages_can_be_allocated_again():
    allocator = PageAllocator(4)
    pages = allocator.alloc(4)
    allocator.free(pages[:2])
    assert allocator.num_free == 2
    assert sorted(allocator.alloc(2)) == sorted(pages[:2])
    assert allocator.alloc(0) == []


def test_req_to_token_pool_reuses_freed_rows():
    pool = ReqToTokenPool(max_requests=2, max_context_len=8, device="cpu")
    rows = [pool.alloc(), pool.alloc()]
    assert sorted(rows) == [0, 1]
    assert pool.alloc() is None and pool.num_free == 0
    pool.free(rows[0])
    assert pool.alloc() == rows[0]


def test_assign_pages_writes_each_pages_slots_in_order():
    pool = ReqToTokenPool(max_requests=2, max_context_len=16, device="cpu")
    pool.assign_pages(1, 0, [5, 2], page_size=4)
    pool.assign_pages(1, 2, [7], page_size=4)
    expected = [20, 21, 22, 23, 8, 9, 10, 11, 28, 29, 30, 31]
    assert pool.table[1, :12].tolist() == expected
    assert pool.table[0].tolist() == [0] * 16


def test_assign_pages_clips_a_last_page_past_the_context():
    pool = ReqToTokenPool(max_requests=1, max_context_len=6, device="cpu")
    pool.assign_pages(0, 0, [1, 3], page_size=4)
    assert pool.table[0].tolist() == [4, 5, 6, 7, 12, 13]


def test_kv_cache_buffers_have_one_slot_per_token_of_every_page():
    cache = PagedKVCache(num_layers=3, num_kv_heads=2, head_dim=8, num_pages=5, page_size=4, dtype=torch.float32, device="cpu")
    assert len(cache.k_buffers) == len(cache.v_buffers) == 3
    assert cache.k_buffers[0].shape == (20, 2, 8)
    assert cache.num_bytes == 2 * 3 * 20 * 2 * 8 * 4


def test_kv_cache_write_stores_at_the_given_slots_of_one_layer():
    cache = PagedKVCache(2, 1, 2, num_pages=2, page_size=2, dtype=torch.float32, device="cpu")
    k = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    cache.write(1, torch.tensor([3, 0]), k, -k)
    assert cache.k_buffers[1][3].tolist() == [[1.0, 2.0]]
    assert cache.v_buffers[1][0].tolist() == [[-3.0, -4.0]]
    assert cache.k_buffers[0].abs().sum() == 0


# --- quantized caches: [cache] kv_dtype int8 and fp8_e4m3 ---

QUANTIZED = [torch.int8, torch.float8_e4m3fn]


def random_rows(seed: int, rows: int = 64, head_dim: int = 64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # Rows of very different magnitudes, as K/V heads have: a per-row scale must follow each.
    magnitudes = torch.logspace(-3, 2, rows).unsqueeze(-1)
    return torch.randn(rows, head_dim, generator=generator) * magnitudes


def test_the_rotation_undone_gives_the_rows_back():
    rows = random_rows(5)
    assert rotation_block(64) == 64 and rotation_block(96) == 32
    error = (rotate_rows(rotate_rows(rows)) / 64 - rows).abs().amax(dim=-1)
    assert error.div(rows.abs().amax(dim=-1)).max() < 1e-5
    # A key's one outsized channel is spread over the whole rotated row.
    spike = torch.zeros(64)
    spike[5] = 50.0
    assert rotate_rows(spike).abs().tolist() == [50.0] * 64


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_quantized_rows_scale_by_each_rotated_rows_largest_value(dtype):
    rows = random_rows(0)
    stored, scales = quantize_rows(rows, dtype)
    assert stored.dtype == dtype and stored.shape == rows.shape
    assert scales.dtype == SCALE_DTYPE == torch.float16 and scales.shape == (64,)
    largest = QUANTIZED_KV_DTYPES[dtype]
    # float16's rounding: half a unit of its 10-bit mantissa, or of its subnormals' spacing (2**-24) below 2**-14.
    expected = rotate_rows(rows).abs().amax(dim=-1) / largest
    torch.testing.assert_close(scales.float(), expected, rtol=2**-11, atol=2**-25)
    assert stored.float().abs().amax(dim=-1).le(largest).all()  # never past the format's range


def round_trip_errors(rows: torch.Tensor, dtype: torch.dtype):
    """The stored rows' error in the rotated basis, their rotated values and scales, and the error read back."""
    stored, scales = quantize_rows(rows, dtype)
    rotated = rotate_rows(rows)
    read_back = unrotated_rows(stored, scales)
    return (dequantize_rows(stored, scales) - rotated).abs(), rotated, scales, (read_back - rows).abs()


def assert_read_back_within_the_stored_error(stored_error: torch.Tensor, error: torch.Tensor) -> None:
    # Un-rotating averages a row's errors with signs (H e / n): no value's error exceeds the row's largest.
    assert error.le(stored_error.amax(dim=-1, keepdim=True) + 1e-6).all()


def test_int8_round_trip_is_within_half_a_step_of_each_rows_scale():
    rows = random_rows(1)
    stored_error, rotated, scales, error = round_trip_errors(rows, torch.int8)
    # Half a step of rounding, plus what a float16 scale rounded down leaves past 127 steps (clamped).
    clamped = (rotated.abs().amax(dim=-1) - 127 * scales.float()).clamp(min=0)
    assert stored_error.le((scales.float() * 0.5 + clamped + 1e-9).unsqueeze(-1)).all()
    assert_read_back_within_the_stored_error(stored_error, error)
    assert error.amax(dim=-1).div(rows.abs().amax(dim=-1)).max() < 0.01


def test_fp8_round_trip_keeps_three_mantissa_bits_of_each_rotated_value():
    rows = random_rows(2)
    stored_error, rotated, scales, error = round_trip_errors(rows, torch.float8_e4m3fn)
    # Relative to each value within half an e4m3 step (2**-4), past e4m3's subnormals (below 2**-6 of 448/scale).
    row_scale = scales.float().unsqueeze(-1)
    assert stored_error.le(rotated.abs() * (2**-4 + 2**-10) + row_scale * 2**-9).all()
    assert_read_back_within_the_stored_error(stored_error, error)
    assert error.amax(dim=-1).div(rows.abs().amax(dim=-1)).max() < 0.07


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_a_zero_row_stores_zeros_with_a_zero_scale(dtype):
    rows = torch.zeros(3, 8)
    rows[1, 2] = 5.0
    stored, scales = quantize_rows(rows, dtype)
    assert scales.tolist() == [0.0, pytest.approx(5.0 / QUANTIZED_KV_DTYPES[dtype], rel=1e-3), 0.0]
    assert stored.float()[[0, 2]].abs().sum() == 0 and not dequantize_rows(stored, scales).isnan().any()


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_a_quantized_cache_writes_values_and_scales_as_quantize_rows_does(dtype):
    cache = PagedKVCache(2, 2, 16, num_pages=3, page_size=4, dtype=dtype, device="cpu")
    assert cache.quantized and len(cache.k_scales) == len(cache.v_scales) == 2
    assert cache.k_scales[0].shape == (12, 2) and cache.k_scales[0].dtype == torch.float16
    k, v = random_rows(3, rows=6, head_dim=16).view(3, 2, 16), random_rows(4, rows=6, head_dim=16).view(3, 2, 16)
    slots = torch.tensor([7, 0, 11])
    cache.write(1, slots, k, v)
    for values, buffers, scales in ((k, cache.k_buffers, cache.k_scales), (v, cache.v_buffers, cache.v_scales)):
        stored, row_scales = quantize_rows(values, dtype)
        assert torch.equal(buffers[1][slots].view(torch.uint8), stored.view(torch.uint8))
        assert torch.equal(scales[1][slots], row_scales)
    assert cache.k_buffers[0].view(torch.uint8).sum() == 0 and cache.k_scales[0].abs().sum() == 0
    assert len(cache.slot_tensors) == 8


def test_a_float_cache_has_no_scales():
    cache = PagedKVCache(2, 2, 16, num_pages=3, page_size=4, dtype=torch.bfloat16, device="cpu")
    assert not cache.quantized and cache.k_scales is None and cache.v_scales is None
    assert len(cache.slot_tensors) == 4


def test_bytes_per_token_count_values_and_scales():
    # The default model's shape: 30 layers, 3 KV heads of 64.
    bfloat16 = kv_bytes_per_token(30, 3, 64, torch.bfloat16)
    assert bfloat16 == 2 * 30 * 3 * 64 * 2
    assert kv_bytes_per_token(30, 3, 64, torch.float32) == 2 * bfloat16
    for dtype in QUANTIZED:
        assert kv_bytes_per_token(30, 3, 64, dtype) == 2 * 30 * 3 * (64 + 2)
        cache = PagedKVCache(30, 3, 64, num_pages=2, page_size=16, dtype=dtype, device="cpu")
        assert cache.bytes_per_token == kv_bytes_per_token(30, 3, 64, dtype)
        assert cache.num_bytes == sum(tensor.numel() * tensor.element_size() for tensor in cache.slot_tensors)
    assert bfloat16 / kv_bytes_per_token(30, 3, 64, torch.int8) > 1.93
