"""A radix tree over token ids whose edges own KV pages, shared between requests.

Keys are whole pages of tokens, so a cached prefix is always a whole number of
pages and its KV pages can be put straight into another request's row of the
req-to-token table. A node in use by a running request is locked (its lock
count covers the path from it to the root); unlocked leaves are evicted
least-recently-used first when the page pool runs short.

Each LoRA adapter has a tree of its own (a root per namespace: ``None`` for
the base model, the adapter's name for its requests): the KV of a prompt
depends on the adapter, so a prefix cached under one is never found under
another. Eviction sees every tree at once, oldest leaf first, and an
unloaded adapter's tree is dropped whole (:meth:`drop_namespace`).
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field


@dataclass(eq=False)
class RadixNode:
    parent: "RadixNode | None"
    token_ids: tuple[int, ...]
    pages: list[int]
    children: dict[tuple[int, ...], "RadixNode"] = field(default_factory=dict)
    lock_count: int = 0
    last_access: float = field(default_factory=time.monotonic)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class PrefixMatch:
    num_tokens: int  # length of the cached prefix, a multiple of page_size
    pages: list[int]
    node: RadixNode  # the deepest node whose tokens are all matched (the root when none)


class RadixCache:
    def __init__(self, page_allocator, page_size: int):
        self.page_allocator = page_allocator
        self.page_size = page_size
        self.root = RadixNode(None, (), [], lock_count=1)
        self.roots: dict[str | None, RadixNode] = {None: self.root}
        # Pages held by nodes no running request uses: free memory on demand.
        self.num_evictable_pages = 0
        self.num_cached_pages = 0
        # Called with each node evict() drops, while it still hangs in the tree: the rank tells the
        # API workers what it no longer holds (tercet.scheduler.eviction_reporter). Must not raise.
        self.on_evict = None
        # Called with each node evict() drops, before its pages are freed: the tier below the pool
        # (tercet.scheduler.kv_tiers) copies their K/V. Must not raise.
        self.on_demote = None

    def chain_of(self, node: RadixNode) -> tuple[str | None, tuple[int, ...]]:
        """The LoRA namespace of ``node``'s tree and every token from its root to the end of ``node``."""
        parts = []
        while node.parent is not None:
            parts.append(node.token_ids)
            node = node.parent
        namespace = next((name for name, root in self.roots.items() if root is node), None)
        return namespace, tuple(token for part in reversed(parts) for token in part)

    def _first_page(self, token_ids, start: int) -> tuple[int, ...]:
        return tuple(token_ids[start:start + self.page_size])

    # -- lookup ---------------------------------------------------------------

    def _root_of(self, namespace: str | None) -> RadixNode:
        root = self.roots.get(namespace)
        if root is None:
            root = self.roots[namespace] = RadixNode(None, (), [], lock_count=1)
        return root

    def match_prefix(self, token_ids: list[int], namespace: str | None = None) -> PrefixMatch:
        """The longest cached whole-page prefix of ``token_ids`` under ``namespace`` (no structural change)."""
        node, matched, pages = self._root_of(namespace), 0, []
        while True:
            child = node.children.get(self._first_page(token_ids, matched))
            if child is None:
                break
            num_pages = self._count_matching_pages(child, token_ids, matched)
            child.last_access = time.monotonic()
            pages.extend(child.pages[:num_pages])
            matched += num_pages * self.page_size
            if num_pages < len(child.pages):
                break
            node = child
        return PrefixMatch(matched, pages, node)

    def _count_matching_pages(self, node: RadixNode, token_ids, start: int) -> int:
        size = self.page_size
        count = 0
        for index in range(len(node.pages)):
            begin = start + index * size
            if begin + size > len(token_ids) or node.token_ids[index * size:(index + 1) * size] != tuple(token_ids[begin:begin + size]):
                break
            count += 1
        return count

    def match_and_lock(self, token_ids: list[int], namespace: str | None = None) -> PrefixMatch:
        """Like match_prefix, splitting a partly matched node so the match ends on
        a node, which is locked for the caller (release with ``unlock``)."""
        match = self.match_prefix(token_ids, namespace)
        node = match.node
        remaining = match.num_tokens - self._depth(node)
        if remaining:
            child = node.children[self._first_page(token_ids, self._depth(node))]
            node = self._split(child, remaining // self.page_size)
        self.lock(node)
        return PrefixMatch(match.num_tokens, match.pages, node)

    def _depth(self, node: RadixNode) -> int:
        depth = 0
        while node is not None:
            depth += node.num_tokens
            node = node.parent
        return depth

    def _split(self, node: RadixNode, num_pages: int) -> RadixNode:
        """Cut ``node`` after its first ``num_pages`` pages; return the new upper part."""
        cut = num_pages * self.page_size
        upper = RadixNode(node.parent, node.token_ids[:cut], node.pages[:num_pages],
                          lock_count=node.lock_count, last_access=node.last_access)
        node.parent.children[node.token_ids[: self.page_size]] = upper
        node.token_ids, node.pages, node.parent = node.token_ids[cut:], node.pages[num_pages:], upper
        upper.children[node.token_ids[: self.page_size]] = node
        return upper

    # -- locking --------------------------------------------------------------

    def lock(self, node: RadixNode) -> None:
        while node is not None:
            if node.lock_count == 0:
                self.num_evictable_pages -= len(node.pages)
            node.lock_count += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not None:
            node.lock_count -= 1
            if node.lock_count == 0:
                self.num_evictable_pages += len(node.pages)
            node = node.parent

    # -- insertion and eviction -------------------------------------------------

    def insert(self, token_ids: list[int], pages: list[int], namespace: str | None = None) -> tuple[RadixNode, set[int]]:
        """Cache ``token_ids`` (whole pages) with the KV in ``pages``.

        Returns the node ending at the last token and the pages the tree took
        over; where the tree already held those tokens, it keeps its own pages
        and the caller still owns (and must eventually free) the duplicates.
        """
        assert len(token_ids) == len(pages) * self.page_size
        match = self.match_and_lock(token_ids, namespace)
        node = match.node
        self.unlock(node)
        adopted: set[int] = set()
        if match.num_tokens < len(token_ids):
            new_pages = pages[match.num_tokens // self.page_size:]
            child = RadixNode(node, tuple(token_ids[match.num_tokens:]), list(new_pages))
            node.children[child.token_ids[: self.page_size]] = child
            self.num_evictable_pages += len(new_pages)
            self.num_cached_pages += len(new_pages)
            adopted = set(new_pages)
            node = child
        return node, adopted

    def evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` pages of unlocked leaves, oldest first; return how many were freed."""
        order = itertools.count()
        leaves = [(leaf.last_access, next(order), leaf) for leaf in self._unlocked_leaves()]
        heapq.heapify(leaves)
        freed = 0
        while freed < num_pages and leaves:
            _, _, leaf = heapq.heappop(leaves)
            if self.on_demote is not None:  # a tier below the pool takes the pages' K/V before they are freed
                self.on_demote(leaf)
            self.page_allocator.free(leaf.pages)
            freed += len(leaf.pages)
            self.num_evictable_pages -= len(leaf.pages)
            self.num_cached_pages -= len(leaf.pages)
            if self.on_evict is not None:
                self.on_evict(leaf)
            parent = leaf.parent
            del parent.children[leaf.token_ids[: self.page_size]]
            if parent.parent is not None and not parent.children and parent.lock_count == 0:
                heapq.heappush(leaves, (parent.last_access, next(order), parent))
        return freed

    def _unlocked_leaves(self) -> list[RadixNode]:
        leaves, stack = [], list(self.roots.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.parent is not None and node.lock_count == 0:
                leaves.append(node)
        return leaves

    def drop_namespace(self, namespace: str) -> int:
        """Free every page cached under ``namespace`` (an adapter no request uses any more); how many."""
        root = self.roots.pop(namespace, None)
        if root is None:
            return 0
        freed, stack = 0, list(root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            self.page_allocator.free(node.pages)
            freed += len(node.pages)
            self.num_cached_pages -= len(node.pages)
            if node.lock_count == 0:
                self.num_evictable_pages -= len(node.pages)
        return freed

    def clear(self) -> None:
        """Drop every unlocked node (flush)."""
        self.evict(self.num_cached_pages)
