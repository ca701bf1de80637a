"""The draft model's own KV memory: one row and some pages per request it drafts for.

A draft model (:mod:`tercet.scheduler.speculative.model_drafter`) keeps, for each request,
the K/V of the tokens it has already run, so that a step feeds it only what
is new: the tokens the target accepted since, and its own drafts one by one.
Its pool is small and separate from the target's: it never takes a page the
scheduler could give a request. When it is full, the requests drafted for
longest ago give their place up (they start over the next time); no prefix
is shared between requests.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class DraftSlot:
    row: int
    pages: list[int] = field(default_factory=list)
    # The tokens whose K/V the slot holds, in order from position 0.
    token_ids: tuple[int, ...] = ()


class DraftKVSlots:
    def __init__(self, runner):
        self.page_size = runner.page_size
        self.page_allocator = runner.page_allocator
        self.req_to_token_pool = runner.req_to_token_pool
        self.context_len = runner.context_len
        # By request id, the least recently drafted for first.
        self.slots: OrderedDict[str, DraftSlot] = OrderedDict()

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def slot_for(self, rid: str, num_tokens: int, keep: set[str]) -> DraftSlot | None:
        """The request's slot, with pages for ``num_tokens`` tokens; None when they do not fit
        even after the slots of requests not in ``keep`` gave theirs up."""
        if num_tokens > self.context_len:
            return None
        slot = self.slots.get(rid)
        if slot is None:
            if not self._with_room(lambda: self.req_to_token_pool.num_free > 0, keep):
                return None
            slot = self.slots[rid] = DraftSlot(self.req_to_token_pool.alloc())
        self.slots.move_to_end(rid)
        missing = self.pages_for(num_tokens) - len(slot.pages)
        if missing > 0:
            if not self._with_room(lambda: self.page_allocator.num_free >= missing, keep | {rid}):
                return None
            pages = self.page_allocator.alloc(missing)
            self.req_to_token_pool.assign_pages(slot.row, len(slot.pages), pages, self.page_size)
            slot.pages.extend(pages)
        return slot

    def _with_room(self, has_room, keep: set[str]) -> bool:
        """Free the least recently used slots outside ``keep`` until ``has_room()``."""
        while not has_room():
            victim = next((rid for rid in self.slots if rid not in keep), None)
            if victim is None:
                return False
            self.forget(victim)
        return True

    def forget(self, rid: str) -> None:
        slot = self.slots.pop(rid, None)
        if slot is not None:
            self.page_allocator.free(slot.pages)
            self.req_to_token_pool.free(slot.row)

    @property
    def num_free_pages(self) -> int:
        return self.page_allocator.num_free
