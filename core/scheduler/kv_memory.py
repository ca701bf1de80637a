"""KV memory for requests: a row of the req-to-token table plus its pages.

A request gets every page it can ever need when it is admitted, so a running
batch can never run out of KV memory mid-decode; the pages go back to the pool
when it finishes or is aborted. The n completions of one prompt are admitted
together, all or none.
"""

from __future__ import annotations

import torch

from tercet.scheduler.req import Req


class RequestKVMemory:
    def __init__(self, model_runner):
        self.page_size = model_runner.page_size
        self.page_allocator = model_runner.page_allocator
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.kv_cache = model_runner.kv_cache

    def pages_needed(self, req: Req) -> int:
        return -(-req.max_num_tokens // self.page_size)

    def can_ever_fit(self, group: list[Req]) -> bool:
        return (
            sum(self.pages_needed(req) for req in group) <= self.page_allocator.num_total
            and len(group) <= self.req_to_token_pool.table.shape[0]
        )

    @property
    def capacity_tokens(self) -> int:
        return self.page_allocator.num_total * self.page_size

    def try_allocate_group(self, group: list[Req]) -> bool:
        needed = sum(self.pages_needed(req) for req in group)
        if self.req_to_token_pool.num_free < len(group) or needed > self.page_allocator.num_free:
            return False
        for req in group:
            row = self.req_to_token_pool.alloc()
            pages = self.page_allocator.alloc(self.pages_needed(req))
            self.req_to_token_pool.assign_pages(row, 0, pages, self.page_size)
            req.req_pool_index, req.pages = row, pages
        return True

    def release(self, req: Req) -> None:
        if req.req_pool_index is not None:
            self.req_to_token_pool.free(req.req_pool_index)
            self.page_allocator.free(req.pages)
        req.req_pool_index, req.pages = None, []

    def copy_prompt_kv(self, pairs: list[tuple[Req, Req]]) -> None:
        """Give each follower a copy of its leader's prompt K/V (computed once, by the leader)."""
        table = self.req_to_token_pool.table
        sources = torch.cat([table[leader.req_pool_index, : len(leader.input_ids)] for leader, _ in pairs])
        targets = torch.cat([table[follower.req_pool_index, : len(follower.input_ids)] for _, follower in pairs])
        for buffers in (self.kv_cache.k_buffers, self.kv_cache.v_buffers):
            for layer_buffer in buffers:
                layer_buffer[targets] = layer_buffer[sources]
