"""KV memory for requests: a row of the req-to-token table plus its pages.

A request gets every page it can ever need when it is admitted, so a running
batch can never run out of KV memory mid-decode; the pages go back to the pool
when it finishes or is aborted.
"""

from __future__ import annotations

from tercet.scheduler.req import Req


class RequestKVMemory:
    def __init__(self, model_runner):
        self.page_size = model_runner.page_size
        self.page_allocator = model_runner.page_allocator
        self.req_to_token_pool = model_runner.req_to_token_pool

    def pages_needed(self, req: Req) -> int:
        return -(-req.max_num_tokens // self.page_size)

    def can_ever_fit(self, req: Req) -> bool:
        return self.pages_needed(req) <= self.page_allocator.num_total

    def try_allocate(self, req: Req) -> bool:
        if self.req_to_token_pool.num_free == 0 or self.pages_needed(req) > self.page_allocator.num_free:
            return False
        row = self.req_to_token_pool.alloc()
        pages = self.page_allocator.alloc(self.pages_needed(req))
        if row is None or pages is None:
            if row is not None:
                self.req_to_token_pool.free(row)
            return False
        self.req_to_token_pool.assign_pages(row, 0, pages, self.page_size)
        req.req_pool_index, req.pages = row, pages
        return True

    def release(self, req: Req) -> None:
        if req.req_pool_index is not None:
            self.req_to_token_pool.free(req.req_pool_index)
            self.page_allocator.free(req.pages)
        req.req_pool_index, req.pages = None, []

    @property
    def num_free_tokens(self) -> int:
        return self.page_allocator.num_free * self.page_size
