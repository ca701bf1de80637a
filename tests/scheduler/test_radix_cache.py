from tercet.model.kv_cache import PageAllocator
from tercet.scheduler.radix_cache import RadixCache

PAGE = 4


def make_cache(num_pages=32):
    allocator = PageAllocator(num_pages)
    return RadixCache(allocator, PAGE), allocator


def cached(cache, allocator, tokens):
    pages = allocator.alloc(len(tokens) // PAGE)
    node, adopted = cache.insert(tokens, pages)
    return pages, node, adopted


def test_match_finds_the_longest_whole_page_prefix():
    cache, allocator = make_cache()
    pages, _, adopted = cached(cache, allocator, list(range(12)))
    assert adopted == set(pages)
    match = cache.match_prefix(list(range(10)) + [99])
    assert match.num_tokens == 8 and match.pages == pages[:2]
    assert cache.match_prefix([5, 6, 7, 8]).num_tokens == 0


def test_insert_shares_existing_pages_and_returns_duplicates_to_the_caller():
    cache, allocator = make_cache()
    first, _, _ = cached(cache, allocator, list(range(8)))
    second_pages = allocator.alloc(3)
    _, adopted = cache.insert(list(range(8)) + [50, 51, 52, 53], second_pages)
    # The first two pages were already cached: the tree keeps its own, takes only the new third.
    assert adopted == {second_pages[2]}
    assert cache.match_prefix(list(range(8)) + [50, 51, 52, 53]).pages == first + [second_pages[2]]


def test_split_on_partial_match_keeps_both_branches():
    cache, allocator = make_cache()
    cached(cache, allocator, list(range(12)))
    cached(cache, allocator, list(range(4)) + [40, 41, 42, 43])
    assert cache.match_prefix(list(range(12))).num_tokens == 12
    assert cache.match_prefix(list(range(4)) + [40, 41, 42, 43]).num_tokens == 8
    assert set(cache.root.children) == {(0, 1, 2, 3)}


def test_locked_nodes_are_not_evicted_and_lru_goes_first():
    cache, allocator = make_cache(num_pages=8)
    old_pages, _, _ = cached(cache, allocator, [1] * 8)
    new_pages, _, _ = cached(cache, allocator, [2] * 8)
    locked = cache.match_and_lock([3] * 4 + [9])  # nothing matches: locks the root only
    assert locked.num_tokens == 0
    held = cache.match_and_lock([2] * 8 + [9])
    assert cache.num_evictable_pages == 2
    assert cache.evict(1) == 2  # the whole unlocked leaf goes
    assert allocator.num_free == 4 + 2
    assert cache.match_prefix([1] * 8).num_tokens == 0
    assert cache.evict(10) == 0  # the rest is locked
    cache.unlock(held.node)
    assert cache.num_evictable_pages == 2
    assert cache.evict(10) == 2 and allocator.num_free == 8
