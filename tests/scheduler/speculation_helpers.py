"""Proposers for tests, and a run that collects what a client would see of each request."""

from __future__ import annotations

import random

from tercet.plugin_api import Proposer, hookimpl


class Guesser(Proposer):
    """Drafts from ``expected`` (request id -> the output it will have), wrong at every
    ``wrong_every``-th output position; random tokens for requests it does not know."""

    def __init__(self, expected: dict[str, list[int]], wrong_every: int = 4, seed: int = 0):
        self.expected, self.wrong_every = expected, wrong_every
        self.random = random.Random(seed)
        self.calls = 0

    def propose(self, requests):
        self.calls += 1
        return [self.guess(req) for req in requests]

    def guess(self, req) -> list[int]:
        start = len(req.output_ids)
        if req.rid not in self.expected:
            return [self.random.randrange(1000, 2000) for _ in range(req.max_drafts)]
        right = self.expected[req.rid][start:start + req.max_drafts]
        return [token + 1 if (start + offset) % self.wrong_every == self.wrong_every - 1 else token
                for offset, token in enumerate(right)]


def proposer_plugin(name: str, proposer: Proposer):
    """An inline plugin registering ``proposer`` (the same object for every factory call) as ``name``."""

    class Plugin:
        @hookimpl
        def register_speculative_proposers(self, register):
            register(name, lambda config: proposer)

    return Plugin()


def run_collecting(harness, max_steps: int = 2000, after_step=None) -> dict[str, dict]:
    """Step until idle (calling ``after_step()`` after each step); per request id its ``tokens``,
    ``logprobs``, ``top`` and finish ``reason``."""
    seen: dict[str, dict] = {}
    for _ in range(max_steps):
        for output in harness.step():
            for rid, new_ids, reason, logprobs in zip(output.rids, output.new_token_ids, output.finished_reasons,
                                                       output.output_logprobs):
                entry = seen.setdefault(rid, {"tokens": [], "logprobs": [], "top": [], "reason": None})
                entry["tokens"] += new_ids
                if logprobs is not None:
                    entry["logprobs"] += logprobs.logprobs
                    entry["top"] += [[pair[0] for pair in top] for top in logprobs.top]
                entry["reason"] = entry["reason"] or reason
        if after_step is not None:
            after_step()
        if harness.is_idle():
            return seen
    raise AssertionError(f"requests did not finish in {max_steps} steps")
