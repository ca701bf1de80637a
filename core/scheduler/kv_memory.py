"""KV memory of requests: a row of the req-to-token table, pages, and the prefix cache.

Pages are taken as a request's tokens are fed (a prompt chunk, then one token
per decode step) and given back when it finishes, is aborted or is retracted.
With the prefix cache on, a request starts from the longest cached whole-page
prefix of its tokens (shared pages, locked while it runs), and what it
computed is cached when its prompt is done and when it leaves.
"""

from __future__ import annotations

import torch

from tercet.scheduler.radix_cache import RadixCache
from tercet.scheduler.req import Req


class RequestKVMemory:
    def __init__(self, model_runner, prefix_cache: RadixCache | None):
        self.page_size = model_runner.page_size
        self.page_allocator = model_runner.page_allocator
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.kv_cache = model_runner.kv_cache
        self.prefix_cache = prefix_cache
        # The tier below the pool (tercet.scheduler.kv_tiers.tiered_cache.KVTiers); None without one.
        self.kv_tiers = None

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    @property
    def capacity_tokens(self) -> int:
        return self.page_allocator.num_total * self.page_size

    @property
    def num_available_pages(self) -> int:
        """Free pages plus cached pages no running request uses."""
        evictable = self.prefix_cache.num_evictable_pages if self.prefix_cache else 0
        return self.page_allocator.num_free + evictable

    def cached_prefix_tokens(self, req: Req) -> int:
        if self.prefix_cache is None or req.sampling_params.return_prompt_logprob:
            return 0
        return self.prefix_cache.match_prefix(self._matchable(req), req.lora_name).num_tokens

    def _matchable(self, req: Req) -> list[int]:
        # At least one token must be fed, to get logits for the next one.
        return req.all_token_ids[:-1]

    def admit(self, req: Req, use_prefix_cache: bool = True) -> None:
        """Give the request a table row, starting from its cached prefix."""
        req.req_pool_index = self.req_to_token_pool.alloc()
        req.pages, req.tree_pages, req.num_cached_tokens = [], set(), 0
        if self.prefix_cache is not None and use_prefix_cache and not req.sampling_params.return_prompt_logprob:
            match = self.prefix_cache.match_and_lock(self._matchable(req), req.lora_name)
            req.prefix_node = match.node
            req.pages, req.tree_pages = list(match.pages), set(match.pages)
            req.num_cached_tokens = match.num_tokens
            if match.pages:
                self.req_to_token_pool.assign_pages(req.req_pool_index, 0, match.pages, self.page_size)
        if req.num_prefix_cache_hits is None:
            req.num_prefix_cache_hits = min(req.num_cached_tokens, len(req.input_ids))

    def ensure_pages(self, req: Req, num_tokens: int) -> bool:
        """Make the request's pages cover ``num_tokens`` tokens, evicting cached pages if needed."""
        missing = self.pages_for(num_tokens) - len(req.pages)
        if missing <= 0:
            return True
        if self.page_allocator.num_free < missing and self.prefix_cache is not None:
            self.prefix_cache.evict(missing - self.page_allocator.num_free)
        pages = self.page_allocator.alloc(missing)
        if pages is None:
            return False
        self.req_to_token_pool.assign_pages(req.req_pool_index, len(req.pages), pages, self.page_size)
        req.pages.extend(pages)
        return True

    def trim_pages(self, req: Req) -> None:
        """Free the request's pages past those its tokens need: pages that held only rejected drafts."""
        keep = max(self.pages_for(req.num_tokens), len(req.tree_pages))
        if len(req.pages) > keep:
            self.page_allocator.free(req.pages[keep:])
            del req.pages[keep:]

    def lend(self, lengths: list[int]) -> list[tuple[int, list[int]]] | None:
        """A table row, and pages for its tokens, for each of ``lengths``: for sequences run
        once and forgotten (embeddings), given back with :meth:`take_back` right after their
        forward. None, with nothing taken, when they do not all fit now."""
        num_pages = sum(self.pages_for(length) for length in lengths)
        if self.req_to_token_pool.num_free < len(lengths) or num_pages > self.num_available_pages:
            return None
        if self.page_allocator.num_free < num_pages:
            self.prefix_cache.evict(num_pages - self.page_allocator.num_free)
        loans = []
        for length in lengths:
            row, pages = self.req_to_token_pool.alloc(), self.page_allocator.alloc(self.pages_for(length))
            self.req_to_token_pool.assign_pages(row, 0, pages, self.page_size)
            loans.append((row, pages))
        return loans

    def take_back(self, loans: list[tuple[int, list[int]]]) -> None:
        for row, pages in loans:
            self.page_allocator.free(pages)
            self.req_to_token_pool.free(row)

    def cache_computed_prefix(self, req: Req) -> None:
        """Put the request's computed whole pages into the prefix cache, keeping them locked for it."""
        if self.prefix_cache is None or req.req_pool_index is None:
            return
        num_pages = req.num_cached_tokens // self.page_size
        if num_pages == 0:
            return
        node, adopted = self.prefix_cache.insert(
            req.all_token_ids[: num_pages * self.page_size], req.pages[:num_pages], req.lora_name
        )
        req.tree_pages |= adopted
        self.prefix_cache.lock(node)
        if req.prefix_node is not None:
            self.prefix_cache.unlock(req.prefix_node)
        req.prefix_node = node

    def release(self, req: Req) -> None:
        """Give back everything the request holds; what it computed stays cached."""
        if req.req_pool_index is None:
            return
        self.cache_computed_prefix(req)
        if req.prefix_node is not None:
            self.prefix_cache.unlock(req.prefix_node)
        own_pages = [page for page in req.pages if page not in req.tree_pages]
        self.page_allocator.free(own_pages)
        self.req_to_token_pool.free(req.req_pool_index)
        req.req_pool_index, req.pages, req.tree_pages, req.prefix_node = None, [], set(), None
        req.num_cached_tokens = 0

    def copy_prompt_kv(self, pairs: list[tuple[Req, Req]]) -> None:
        """Give each follower a copy of its leader's prompt K/V (computed once, by the leader)."""
        table = self.req_to_token_pool.table
        sources = torch.cat([table[leader.req_pool_index, : len(leader.input_ids)] for leader, _ in pairs])
        targets = torch.cat([table[follower.req_pool_index, : len(follower.input_ids)] for _, follower in pairs])
        for layer_tensor in self.kv_cache.slot_tensors:  # a quantized cache's scales too
            layer_tensor[targets] = layer_tensor[sources]
