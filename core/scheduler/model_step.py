"""One model step: pick what each running request feeds, run the forward, sample, finish."""

from __future__ import annotations

from tercet.messages import FinishReason, TokenLogprobs
from tercet.scheduler.req import Req
from tercet.scheduler.row_sampling import TokenChoice, sample_rows


class ModelStep:
    def __init__(self, scheduler, chunked_prefill_size: int):
        self.scheduler = scheduler
        self.chunked_prefill_size = chunked_prefill_size

    def run(self) -> None:
        with self.scheduler.timer.stage("schedule"):
            self.make_room_for_decoding()
            fed, feeds = self.plan_feeds()
        if fed:
            self.forward_and_sample(fed, feeds)

    def make_room_for_decoding(self) -> None:
        """Retract the newest requests until every decoding request can get its next page."""
        scheduler = self.scheduler
        memory = scheduler.kv_memory
        while len(scheduler.running) > 1:
            needed = sum(
                1 for req in scheduler.running
                if not req.is_prefilling and memory.pages_for(req.num_tokens) > len(req.pages)
            )
            if needed <= memory.num_available_pages:
                return
            leaders = [req for req in scheduler.running if not self.is_waiting_follower(req)]
            scheduler.retract(max(leaders, key=lambda req: req.arrival_index))

    def is_waiting_follower(self, req: Req) -> bool:
        return any(req in leader.followers for leader in self.scheduler.running if leader.followers)

    def plan_feeds(self) -> tuple[list[Req], list[list[int]]]:
        """Decoders feed their last token; prefilling requests share the step's chunk budget."""
        memory = self.scheduler.kv_memory
        budget = self.chunked_prefill_size
        waiting_followers = {id(f) for leader in self.scheduler.running for f in leader.followers}
        fed: list[Req] = []
        feeds: list[list[int]] = []
        ordered = sorted(self.scheduler.running, key=lambda req: req.is_prefilling)
        for req in ordered:
            if id(req) in waiting_followers:
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

    def forward_and_sample(self, fed: list[Req], feeds: list[list[int]]) -> None:
        scheduler = self.scheduler
        runner = scheduler.model_runner
        timer = scheduler.timer
        with timer.stage("forward"):
            forward_batch = runner.build_batch(
                req_pool_indices=[req.req_pool_index for req in fed],
                prefix_lens=[req.num_cached_tokens for req in fed],
                new_token_ids=feeds,
            )
            logits = self.forward(forward_batch, fed)
        with timer.stage("sample"):
            self.sample_and_finish(fed, feeds, logits)

    def sample_and_finish(self, fed: list[Req], feeds: list[list[int]], logits) -> None:
        self.advance_cached_tokens(fed, feeds)
        rows, sampled = self.rows_to_sample(fed)
        if not sampled:
            return
        if rows != list(range(len(fed))):
            logits = logits[rows]
        logits = self.constrained(sampled, logits)
        for req, choice in zip(sampled, sample_rows(self.scheduler, sampled, logits)):
            if choice is not None and not req.is_finished:
                self.take_token(req, choice)
        self.scheduler.running = [req for req in self.scheduler.running if not req.is_finished]

    def constrained(self, sampled: list[Req], logits):
        """``logits`` with every constrained row masked to the tokens its grammar allows."""
        rows = [row for row, req in enumerate(sampled) if req.grammar is not None]
        if not rows:
            return logits
        from tercet.model.grammar_mask import mask_rows, new_bitmask

        scheduler = self.scheduler
        bitmask = new_bitmask(len(rows), logits.shape[1])
        dead = []
        for position, row in enumerate(rows):
            req = sampled[row]
            try:
                req.grammar.fill_bitmask(bitmask, position)
            except Exception:
                # The backend is a plugin: its failure ends this request only.
                scheduler.failures.record("grammar", f"the grammar backend failed on request {req.rid!r}",
                                          plugin=scheduler.grammars.plugin_name)
                dead.append(position)
                continue
            if not bitmask[position].any():
                # A grammar that allows nothing (not even EOS) cannot go on.
                scheduler.failures.record("grammar", f"the output constraint of request {req.rid!r} allows no token",
                                          plugin=scheduler.grammars.plugin_name, with_traceback=False)
                dead.append(position)
        for position in dead:
            # That request ends; its row is sampled unmasked and the token dropped.
            scheduler.fail(sampled[rows[position]], "its output constraint")
        live = [position for position in range(len(rows)) if position not in dead]
        if not live:
            return logits
        return mask_rows(logits, [rows[position] for position in live], bitmask[live])

    def advance_cached_tokens(self, fed: list[Req], feeds: list[list[int]]) -> None:
        """What was fed is now in the KV cache; a prompt just completed is shared with the prefix cache."""
        was_prefilling_prompt = [req.num_cached_tokens < len(req.input_ids) for req in fed]
        for req, feed in zip(fed, feeds):
            req.num_cached_tokens += len(feed)
        for req, was_prefilling in zip(fed, was_prefilling_prompt):
            if was_prefilling and req.num_cached_tokens >= len(req.input_ids):
                # The whole prompt is computed: share it with requests arriving meanwhile.
                self.scheduler.kv_memory.cache_computed_prefix(req)

    def rows_to_sample(self, fed: list[Req]) -> tuple[list[int], list[Req]]:
        """Requests that fed their last token, then followers of a leader whose
        prompt just completed, on their leader's row (their prompt KV copied)."""
        rows = [row for row, req in enumerate(fed) if req.num_cached_tokens == req.num_tokens]
        sampled = [fed[row] for row in rows]
        followers = []
        for row, leader in enumerate(fed):
            if leader.followers and leader.num_cached_tokens >= len(leader.input_ids):
                for follower in leader.followers:
                    follower.num_cached_tokens = len(follower.input_ids)
                    followers.append((leader, follower))
                    rows.append(row)
                    sampled.append(follower)
                leader.followers = []
        if followers:
            self.scheduler.kv_memory.copy_prompt_kv(followers)
        return rows, sampled

    def take_token(self, req: Req, choice: TokenChoice) -> None:
        """Append the sampled token and finish the request if it is done."""
        scheduler = self.scheduler
        if req.needs_prefill_only:
            scheduler.finish(req, FinishReason("length"))
            return
        req.output_ids.append(choice.token_id)
        if req.sampling_params.return_logprob:
            req.unsent_logprobs.append(choice.logprob)
            req.unsent_top_logprobs.append(choice.top_logprobs)
        if req.grammar is not None:
            try:
                accepted = req.grammar.accept(choice.token_id)
                complete = accepted and req.grammar.is_complete()
            except Exception:
                accepted = complete = False
            if not accepted:
                scheduler.failures.record("grammar", f"the grammar of request {req.rid!r} did not take its sampled token",
                                          plugin=scheduler.grammars.plugin_name)
                scheduler.fail(req, "advancing its output constraint")
                return
            if complete:
                # The output is a whole match: nothing but EOS could follow.
                scheduler.finish(req, FinishReason("stop"))
                return
        try:
            reason = scheduler.stop_conditions.check(req)
        except Exception:
            scheduler.failures.record("stop_check", f"checking the stop conditions of request {req.rid!r} failed")
            scheduler.fail(req, "checking its stop conditions")
            return
        if reason is not None:
            scheduler.finish(req, reason)

    def forward(self, forward_batch, fed: list[Req]):
        """Logits of each sequence's last token, plus prompt log-probabilities where asked."""
        from tercet.model.logprobs import prompt_logprobs_of_chunk

        runner = self.scheduler.model_runner
        wanting = [index for index, req in enumerate(fed) if self.computes_prompt_logprobs(req)]
        if not wanting:
            return runner.forward(forward_batch)
        logits, chunk_logits = runner.forward_with_prompt_logits(forward_batch, wanting)
        for index, rows in chunk_logits.items():
            req = fed[index]
            part = prompt_logprobs_of_chunk(rows, req.input_ids, req.num_cached_tokens, req.sampling_params.top_logprobs_num)
            req.prompt_logprobs = TokenLogprobs.concat([req.prompt_logprobs, part])
        return logits

    @staticmethod
    def computes_prompt_logprobs(req: Req) -> bool:
        if not req.sampling_params.return_prompt_logprob or req.num_cached_tokens >= len(req.input_ids):
            return False
        # Chunks covering positions [0, e) give e + 1 entries: position 0's None and 1..e.
        done = len(req.prompt_logprobs.token_ids) if req.prompt_logprobs is not None else 0
        return done == (0 if req.num_cached_tokens == 0 else req.num_cached_tokens + 1)
