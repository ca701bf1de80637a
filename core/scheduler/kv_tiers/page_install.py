"""Pages read back from a tier (or a saved session) put into the pool and the radix tree.

The pages continue a prefix the tree holds: ``page_values[0]`` is the page
after the first ``first_page`` pages of ``token_ids``. The tree's part is
locked while pages are allocated (allocating may evict), so it cannot vanish
under the new pages; pages the tree already holds again are skipped, and
those it does not take over are freed at once.
"""

from __future__ import annotations


def install_pages(radix_cache, pool_pages, token_ids: list[int], namespace: str | None, first_page: int,
                  page_values: list) -> int:
    """Put what fits of ``page_values`` into the pool after the tree's prefix; the tokens now cached."""
    size = radix_cache.page_size
    match = radix_cache.match_and_lock(token_ids[:(first_page + len(page_values)) * size], namespace)
    try:
        held = match.num_tokens // size
        if held < first_page:  # the prefix above them left the pool meanwhile: they connect to nothing
            return match.num_tokens
        wanted = page_values[held - first_page:]
        allocator = radix_cache.page_allocator
        if allocator.num_free < len(wanted):
            radix_cache.evict(len(wanted) - allocator.num_free)
        pages = allocator.alloc(min(len(wanted), allocator.num_free)) or []
        if not pages:
            return match.num_tokens
        pool_pages.copy_in(pages, wanted[:len(pages)])
        num_pages = held + len(pages)
        _, adopted = radix_cache.insert(token_ids[:num_pages * size], match.pages + pages, namespace)
        allocator.free([page for page in pages if page not in adopted])
        return num_pages * size
    finally:
        radix_cache.unlock(match.node)
