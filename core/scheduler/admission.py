"""Admission: which waiting requests join the running batch this step.

The policy orders the waiting queue; requests are admitted in that order while
the batch cap, the step's prefill budget and KV memory allow, stopping at the
first that does not fit (so the policy's order is respected). When one does
not fit (batch cap or memory), the policy may name running requests to preempt.
"""

from __future__ import annotations

from tercet.scheduler.req import Req


class Admission:
    def __init__(self, scheduler, scheduler_config):
        self.scheduler = scheduler
        self.max_running_requests = scheduler_config.max_running_requests
        self.prefill_token_budget = scheduler_config.chunked_prefill_size

    def admit_waiting_requests(self) -> list[Req]:
        scheduler = self.scheduler
        if not scheduler.waiting:
            return []
        budget = self.prefill_token_budget - sum(
            len(req.tokens_to_feed()) for req in scheduler.running if req.is_prefilling
        )
        admitted: list[Req] = []
        view = scheduler.policy.scheduler_view(scheduler.running, scheduler.prefix_cache)
        for leader in scheduler.policy.order(list(scheduler.waiting), view):
            group = leader.group
            if admitted and budget <= 0:
                break
            to_prefill = leader.num_tokens - scheduler.kv_memory.cached_prefix_tokens(leader)
            if not self.fits(group, to_prefill, budget) and not self.preempt_for(group, to_prefill, budget):
                break
            self.admit(group)
            admitted.extend(group)
            budget -= to_prefill
        return admitted

    def pages_needed(self, group: list[Req], to_prefill: int, budget: int) -> int:
        """Pages for the leader's first prefill chunk and the followers' prompt copies,
        plus one page of decode headroom for every running request."""
        memory = self.scheduler.kv_memory
        leader = group[0]
        cached = leader.num_tokens - to_prefill
        first_chunk = min(to_prefill, max(budget, 1))
        leader_pages = memory.pages_for(cached + first_chunk) - cached // memory.page_size
        follower_pages = sum(memory.pages_for(len(follower.input_ids)) for follower in group[1:])
        return leader_pages + follower_pages + len(self.scheduler.running)

    def fits(self, group: list[Req], to_prefill: int, budget: int) -> bool:
        """Within the batch cap, with a table row for each and the pages for a first chunk."""
        memory = self.scheduler.kv_memory
        return (
            len(self.scheduler.running) + len(group) <= self.max_running_requests
            and memory.req_to_token_pool.num_free >= len(group)
            and self.pages_needed(group, to_prefill, budget) <= memory.num_available_pages
        )

    def preempt_for(self, group: list[Req], to_prefill: int, budget: int) -> bool:
        scheduler = self.scheduler
        while not self.fits(group, to_prefill, budget):
            # Completions still waiting for their leader's prompt are not offered:
            # they move with their leader.
            waiting_followers = {id(f) for leader in scheduler.running for f in leader.followers}
            candidates = tuple(req for req in scheduler.running if id(req) not in waiting_followers)
            victim = scheduler.policy.choose_preemption_victim(group[0], candidates)
            if victim is None or victim not in candidates:
                return False
            scheduler.retract(victim)
        return True

    def admit(self, group: list[Req]) -> None:
        scheduler = self.scheduler
        memory = scheduler.kv_memory
        leader = group[0]
        scheduler.waiting.remove(leader)
        memory.admit(leader)
        if leader.num_retractions == 0:
            scheduler.num_prompt_tokens_admitted += len(leader.input_ids)
            scheduler.num_prompt_tokens_from_cache += leader.num_prefix_cache_hits or 0
        scheduler.running.append(leader)
        for follower in list(leader.followers):
            memory.admit(follower, use_prefix_cache=False)
            if memory.ensure_pages(follower, len(follower.input_ids)):
                scheduler.running.append(follower)
            else:
                # No room for a copy of the prompt: it waits and prefills on its own.
                memory.release(follower)
                leader.followers.remove(follower)
                scheduler.waiting.append(follower)
