"""Admission: which waiting requests join the running batch this step.

The policy orders the waiting queue; requests are admitted in that order while
the batch cap, the step's prefill budget and KV memory allow, stopping at the
first that does not fit (so the policy's order is respected). When one does
not fit (batch cap or memory), the policy may name running requests to preempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tercet.scheduler.prefill_budget import PrefillBudget
from tercet.scheduler.req import Req

if TYPE_CHECKING:
    from tercet.config import SchedulerConfig
    from tercet.scheduler.contained_policy import ContainedPolicy
    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.request_queues import RequestQueues


class Admission:
    def __init__(self, queues: "RequestQueues", kv_memory: "RequestKVMemory", policy: "ContainedPolicy",
                 scheduler_config: "SchedulerConfig", prefill_budget: PrefillBudget | None = None):
        self.queues = queues
        self.kv_memory = kv_memory
        # A ContainedPolicy: the plugin's order, or arrival order when it fails.
        self.policy = policy
        self.max_running_requests = scheduler_config.max_running_requests
        # The step's prompt tokens, shared with the model step (which learns what they cost).
        self.prefill_budget = prefill_budget or PrefillBudget(scheduler_config.chunked_prefill_size,
                                                              scheduler_config.max_decode_slowdown)

    def admit_waiting_requests(self) -> list[Req]:
        queues = self.queues
        if not queues.waiting:
            return []
        running = queues.running
        budget = self.prompt_tokens_left(running)
        admitted: list[Req] = []
        view = self.policy.scheduler_view(running, self.kv_memory.prefix_cache)
        for leader in self.with_prefix_ready(self.policy.order(list(queues.waiting), view)):
            group = leader.group
            if admitted and budget <= 0:
                break
            to_prefill = leader.num_tokens - self.kv_memory.cached_prefix_tokens(leader)
            if not self.fits(group, to_prefill, budget) and not self.preempt_for(group, to_prefill, budget):
                break
            self.admit(group)
            admitted.extend(group)
            budget -= to_prefill
        return admitted

    def with_prefix_ready(self, leaders):
        """The leaders in order, less those whose prefix is being read back from the tier below the pool
        (in a thread: they wait); asked lazily, as admission reaches each."""
        tiers = self.kv_memory.kv_tiers
        return leaders if tiers is None else (leader for leader in leaders if tiers.promotion.ready(leader))

    def prompt_tokens_left(self, running) -> int:
        """The step's prompt-token budget less what the running requests still have to prefill."""
        prefilling = [req for req in running if req.is_prefilling]
        allowed = self.prefill_budget.tokens(num_decoding=len(running) - len(prefilling))
        return allowed - sum(len(req.tokens_to_feed()) for req in prefilling)

    @property
    def is_reading_prefixes(self) -> bool:
        """A waiting request's prefix is being read back from the tier below the pool, in a thread."""
        tiers = self.kv_memory.kv_tiers
        return tiers is not None and tiers.promotion.is_reading

    def pages_needed(self, group: list[Req], to_prefill: int, budget: int) -> int:
        """Pages for the leader's first prefill chunk and the followers' prompt copies,
        plus one page of decode headroom for every running request."""
        memory = self.kv_memory
        leader = group[0]
        cached = leader.num_tokens - to_prefill
        first_chunk = min(to_prefill, max(budget, 1))
        leader_pages = memory.pages_for(cached + first_chunk) - cached // memory.page_size
        follower_pages = sum(memory.pages_for(len(follower.input_ids)) for follower in group[1:])
        return leader_pages + follower_pages + self.queues.num_running

    def fits(self, group: list[Req], to_prefill: int, budget: int) -> bool:
        """Within the batch cap, with a table row for each and the pages for a first chunk."""
        memory = self.kv_memory
        return (
            self.queues.num_running + len(group) <= self.max_running_requests
            and memory.req_to_token_pool.num_free >= len(group)
            and self.pages_needed(group, to_prefill, budget) <= memory.num_available_pages
        )

    def preempt_for(self, group: list[Req], to_prefill: int, budget: int) -> bool:
        while not self.fits(group, to_prefill, budget):
            # Completions still waiting for their leader's prompt are not offered:
            # they move with their leader.
            candidates = tuple(req for req in self.queues.running if not req.is_waiting_for_leader)
            victim = self.policy.choose_preemption_victim(group[0], candidates)
            if victim is None or victim not in candidates:
                return False
            self.queues.retract(victim)
        return True

    def admit(self, group: list[Req]) -> None:
        leader = group[0]
        if self.kv_memory.kv_tiers is not None:
            self.kv_memory.kv_tiers.promotion.forget(leader.rid)
        self.kv_memory.admit(leader)
        left_behind = [follower for follower in leader.followers if not self.seat_follower(follower)]
        self.queues.admit(leader, left_behind)

    def seat_follower(self, follower: Req) -> bool:
        """A table row and the pages for a copy of the leader's prompt; with no room for
        them, False (and nothing held): the follower waits and prefills on its own."""
        memory = self.kv_memory
        memory.admit(follower, use_prefix_cache=False)
        if memory.ensure_pages(follower, len(follower.input_ids)):
            return True
        memory.release(follower)
        return False
