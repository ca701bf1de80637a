"""One model step: pick what each running request feeds, run the forward, sample, finish.

A step does, in order: retract requests until every decoder has room for its
next token; plan each running request's feed (decoders their last token,
prefilling requests a share of the chunk budget), then append the speculative
proposer's drafts to the feeds of decoders that speculate
(:mod:`tercet.scheduler.speculative.speculation`); run the forward; record what was fed
as cached; pick the rows to sample (requests that fed their last token, n > 1
followers whose leader's prompt just completed, and one row per draft
position of a speculating request); mask constrained rows; sample; and let
each sampled token finish its request when it is done
(:mod:`tercet.scheduler.sampled_tokens`), a speculating request's accepted
tokens one by one (:mod:`tercet.scheduler.speculative.draft_verification`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from tercet.containment import ContainedFailures
from tercet.ipc.messages import TokenLogprobs
from tercet.scheduler.grammar.grammar_masks import GrammarMasks
from tercet.scheduler.prefill_budget import PrefillBudget
from tercet.scheduler.req import Req
from tercet.scheduler.row_sampling import TokenChoice, sample_rows
from tercet.scheduler.sampled_tokens import SampledTokens
from tercet.scheduler.speculative.draft_verification import DraftRows
from tercet.scheduler.stop_conditions import StopConditions

if TYPE_CHECKING:
    from tercet.metrics.stage_timer import NoStageTimer, StageTimer
    from tercet.model.model_runner import ModelRunner
    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.request_queues import RequestQueues
    from tercet.scheduler.speculative.speculation import Speculation


class ModelStep:
    # An encoder's scheduler builds one over its EncoderRunner too, never stepped: nothing it serves feeds tokens.
    def __init__(self, queues: "RequestQueues", kv_memory: "RequestKVMemory", model_runner: "ModelRunner",
                 timer: "StageTimer | NoStageTimer", *, stop_conditions: StopConditions,
                 failures: ContainedFailures, grammar_plugin: str | None, prefill_budget: PrefillBudget,
                 speculation: "Speculation | None" = None):
        self.queues = queues
        self.kv_memory = kv_memory
        self.model_runner = model_runner
        self.timer = timer
        self.stop_conditions = stop_conditions
        self.failures = failures
        self.prefill_budget = prefill_budget
        self.grammar_masks = GrammarMasks(queues, failures, grammar_plugin)
        self.sampled_tokens = SampledTokens(queues, stop_conditions, failures, grammar_plugin)
        self.speculation = speculation

    def run(self) -> None:
        with self.timer.stage("schedule"):
            self.make_room_for_decoding()
            fed, feeds = self.plan_feeds()
            drafted = {}
            if fed and self.speculation is not None:
                drafted = self.speculation.add_drafts(fed, feeds, self.kv_memory, self.queues.running)
        if fed:
            self.forward_and_sample(fed, feeds, drafted)

    def make_room_for_decoding(self) -> None:
        """Retract the newest requests until every decoding request can get its next page."""
        memory = self.kv_memory
        while self.queues.num_running > 1:
            running = self.queues.running
            needed = sum(
                1 for req in running
                if not req.is_prefilling and memory.pages_for(req.num_tokens) > len(req.pages)
            )
            if needed <= memory.num_available_pages:
                return
            leaders = [req for req in running if not req.is_waiting_for_leader]
            self.queues.retract(max(leaders, key=lambda req: req.arrival_index))

    def plan_feeds(self) -> tuple[list[Req], list[list[int]]]:
        """Decoders feed their last token; prefilling requests share the step's chunk budget."""
        memory = self.kv_memory
        budget = self.prefill_budget.tokens(sum(1 for req in self.queues.running if not req.is_prefilling))
        fed: list[Req] = []
        feeds: list[list[int]] = []
        # Requests of one adapter side by side: each adapter is one segment of rows for the LoRA backend.
        for req in sorted(self.queues.running, key=lambda req: (req.is_prefilling, req.lora_name or "")):
            if req.is_waiting_for_leader:
                continue
            feed = req.tokens_to_feed()
            if req.is_prefilling:
                if budget <= 0:
                    continue
                feed = feed[:budget]
            if not memory.ensure_pages(req, req.num_cached_tokens + len(feed)):
                continue  # a prefill chunk that does not fit now waits for a later step
            if req.is_prefilling:
                budget -= len(feed)
            fed.append(req)
            feeds.append(feed)
        return fed, feeds

    def forward_and_sample(self, fed: list[Req], feeds: list[list[int]], drafted: dict[int, list[int]]) -> None:
        with self.timer.stage("forward"):
            forward_batch = self.model_runner.build_batch(
                req_pool_indices=[req.req_pool_index for req in fed],
                prefix_lens=[req.num_cached_tokens for req in fed],
                new_token_ids=feeds,
                adapters=[req.lora_name for req in fed],
            )
            prompt_tokens = sum(len(feed) for req, feed in zip(fed, feeds) if req.is_prefilling)
            started = time.perf_counter()
            logits, draft_logits = self.forward(forward_batch, fed, list(drafted))
            self.prefill_budget.record(len(fed) - sum(req.is_prefilling for req in fed), prompt_tokens,
                                       time.perf_counter() - started)
        with self.timer.stage("sample"):
            self.sample_and_finish(fed, feeds, logits, DraftRows.of(fed, drafted, draft_logits))

    def sample_and_finish(self, fed: list[Req], feeds: list[list[int]], logits, draft_rows: DraftRows) -> None:
        self.record_fed_tokens(fed, feeds)
        rows, sampled = self.rows_to_sample(fed, skipped=set(draft_rows.reqs))
        if not sampled and not draft_rows.reqs:
            return
        if rows != list(range(len(fed))):
            logits = logits[rows]
        if draft_rows.reqs:
            logits = torch.cat([logits, *draft_rows.logits])
        rows_reqs = sampled + draft_rows.reqs
        assumed = [[] for _ in sampled] + draft_rows.assumed
        logits = self.grammar_masks.apply(rows_reqs, logits, assumed)
        choices = self.sample(rows_reqs, logits, assumed)
        for req, choice in zip(sampled, choices):
            if choice is not None and not req.is_finished:
                self.sampled_tokens.take(req, choice)
        for req, emitted, num_drafts, num_accepted in draft_rows.accepted(choices[len(sampled):]):
            self.take_verified(req, emitted, num_drafts, num_accepted)

    def take_verified(self, req: Req, emitted: list[TokenChoice], num_drafts: int, num_accepted: int) -> None:
        """Take the tokens a verification emitted, one by one (the request may finish at any),
        then free the pages that held only rejected drafts."""
        self.speculation.record(num_drafts, num_accepted)
        for choice in emitted:
            if req.is_finished:
                return
            # Every token so far was fed: the last one, then the accepted drafts, one per token taken.
            req.num_cached_tokens = req.num_tokens
            self.sampled_tokens.take(req, choice)
        if not req.is_finished:
            self.kv_memory.trim_pages(req)

    def record_fed_tokens(self, fed: list[Req], feeds: list[list[int]]) -> None:
        """What was fed is now in the KV cache; a prompt just completed is shared with the prefix cache.
        Of a feed with drafts only its first token counts: the drafts count as they are accepted."""
        for req, feed in zip(fed, feeds):
            was_prefilling_prompt = req.num_cached_tokens < len(req.input_ids)
            req.num_cached_tokens += min(len(feed), req.num_tokens - req.num_cached_tokens)
            if was_prefilling_prompt and req.num_cached_tokens >= len(req.input_ids):
                # The whole prompt is computed: share it with requests arriving meanwhile.
                self.kv_memory.cache_computed_prefix(req)

    def rows_to_sample(self, fed: list[Req], skipped: set[Req] = frozenset()) -> tuple[list[int], list[Req]]:
        """Requests that fed their last token (but those in ``skipped``, verifying drafts), then
        followers of a leader whose prompt just completed, on their leader's row (their prompt KV copied)."""
        rows = [row for row, req in enumerate(fed) if req.num_cached_tokens == req.num_tokens and req not in skipped]
        sampled = [fed[row] for row in rows]
        copies = []
        for row, leader in enumerate(fed):
            if leader.followers and leader.num_cached_tokens >= len(leader.input_ids):
                for follower in self.queues.start_followers(leader):
                    follower.num_cached_tokens = len(follower.input_ids)
                    copies.append((leader, follower))
                    rows.append(row)
                    sampled.append(follower)
        if copies:
            self.kv_memory.copy_prompt_kv(copies)
        return rows, sampled

    def sample(self, sampled: list[Req], logits, assumed: list[list[int]] | None = None) -> list[TokenChoice | None]:
        return sample_rows(sampled, logits, self.stop_conditions, self.failures, self.queues, assumed)

    def forward(self, forward_batch, fed: list[Req], drafted: list[int]):
        """Logits of each sequence's last token, and of every fed token of the sequences at ``drafted``
        (``{index: [m + 1, V]}``), plus prompt log-probabilities where asked."""
        from tercet.model.logprobs import prompt_logprobs_of_chunk

        runner = self.model_runner
        wanting = [index for index, req in enumerate(fed) if self.computes_prompt_logprobs(req)]
        if not wanting and not drafted:
            return runner.forward(forward_batch), {}
        logits, chunk_logits = runner.forward_with_prompt_logits(forward_batch, wanting + drafted)
        for index in wanting:
            req = fed[index]
            part = prompt_logprobs_of_chunk(
                chunk_logits[index], req.input_ids, req.num_cached_tokens, req.sampling_params.top_logprobs_num
            )
            req.prompt_logprobs = TokenLogprobs.concat([req.prompt_logprobs, part])
        return logits, {index: chunk_logits[index] for index in drafted}

    @staticmethod
    def computes_prompt_logprobs(req: Req) -> bool:
        if not req.sampling_params.return_prompt_logprob or req.num_cached_tokens >= len(req.input_ids):
            return False
        # Chunks covering positions [0, e) give e + 1 entries: position 0's None and 1..e.
        done = len(req.prompt_logprobs.token_ids) if req.prompt_logprobs is not None else 0
        return done == (0 if req.num_cached_tokens == 0 else req.num_cached_tokens + 1)
