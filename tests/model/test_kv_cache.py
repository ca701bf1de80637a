import torch

from tercet.model.kv_cache import PageAllocator, PagedKVCache, ReqToTokenPool


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
