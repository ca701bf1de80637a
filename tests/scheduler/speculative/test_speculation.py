"""Speculative decoding in a real scheduler: the output is the one without it, whatever the drafts."""

from __future__ import annotations

import pytest
from speculation_helpers import Guesser, proposer_plugin, run_collecting

from tercet.sampling_params import SamplingParams

REPEATING_PROMPT = [9, 9, 9, 9, 10, 11, 9, 9, 9, 10, 11, 9, 9]
PLAIN_PROMPT = list(range(40, 60))


def greedy(max_new_tokens=24, **extra):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True, **extra)


def sampled(max_new_tokens=24, **extra):
    # top_k: the tiny random model's distribution is nearly flat over the whole vocabulary, where
    # a draw would hang on the last bits of the logits, which a token's batch-mates may move.
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.9, top_k=8, seed=7,
                          repetition_penalty=1.3, ignore_eos=True, **extra)


REQUESTS = {
    "greedy": (REPEATING_PROMPT, greedy(return_logprob=True, top_logprobs_num=2)),
    "opted-out": (PLAIN_PROMPT, greedy(speculative=False)),
    "sampled": (PLAIN_PROMPT[:12], sampled(return_logprob=True)),
    "two": (REPEATING_PROMPT[:9], sampled(n=2, max_new_tokens=16)),
    "short": (PLAIN_PROMPT[5:], greedy(max_new_tokens=3)),
}


def run(harness, requests=REQUESTS, after_step=None):
    for rid, (prompt, params) in requests.items():
        harness.submit(rid, prompt, params)
    return run_collecting(harness, after_step=after_step)


def assert_same_output(seen, reference):
    assert seen.keys() == reference.keys()
    for rid, expected in reference.items():
        assert seen[rid]["tokens"] == expected["tokens"], rid
        assert seen[rid]["reason"] == expected["reason"], rid
        assert seen[rid]["top"] == expected["top"], rid
        assert seen[rid]["logprobs"] == pytest.approx(expected["logprobs"], abs=1e-4), rid


@pytest.fixture
def reference(tercet_scheduler):
    return run(tercet_scheduler())


def test_greedy_sampled_n_and_logprobs_equal_the_output_without_speculation(tercet_scheduler, reference):
    guesser = Guesser({rid: entry["tokens"] for rid, entry in reference.items()})
    harness = tercet_scheduler([proposer_plugin("guess", guesser)], ["speculative.proposer=guess"])
    seen = run(harness)
    assert_same_output(seen, reference)
    stats = harness.scheduler.model_step.speculation.stats
    assert stats.num_accepted_tokens > 0 and stats.num_accepted_tokens < stats.num_draft_tokens
    # Verifying drafts took fewer forwards than one token a step would.
    assert len(harness.forward_calls) < max(len(entry["tokens"]) for entry in reference.values())


def test_the_ngram_proposer_changes_nothing_in_the_output(tercet_scheduler, reference):
    # A prompt that quotes what the model says after PLAIN_PROMPT: the proposer finds drafts in it.
    quoting = PLAIN_PROMPT + reference["opted-out"]["tokens"][:8] + PLAIN_PROMPT
    requests = {**REQUESTS, "quoting": (quoting, greedy())}
    without = run(tercet_scheduler(), requests)
    harness = tercet_scheduler(settings=["speculative.proposer=ngram", "speculative.max_batch=8"])
    assert_same_output(run(harness, requests), without)
    assert harness.scheduler.model_step.speculation.stats.num_verifications > 0


def test_a_request_ends_where_its_stop_is_even_within_accepted_drafts(tercet_scheduler, reference):
    expected = reference["greedy"]["tokens"]
    requests = {
        "stop-token": (REPEATING_PROMPT, greedy(stop_token_ids=[expected[6]])),
        "max-tokens": (REPEATING_PROMPT, greedy(max_new_tokens=5)),
    }
    without = run(tercet_scheduler(), requests)
    guesser = Guesser({rid: expected for rid in requests}, wrong_every=100)
    harness = tercet_scheduler([proposer_plugin("guess", guesser)], ["speculative.proposer=guess"])
    assert run(harness, requests) == without
    assert without["stop-token"]["tokens"] == expected[: expected.index(expected[6]) + 1]
    assert len(without["max-tokens"]["tokens"]) == 5


def test_after_many_rejections_the_kv_pool_is_back_to_its_baseline(tercet_scheduler, reference):
    harness = tercet_scheduler([proposer_plugin("wild", Guesser({}))], ["speculative.proposer=wild"])
    memory = harness.scheduler.kv_memory
    allocator, cache = memory.page_allocator, harness.scheduler.prefix_cache

    def no_page_holds_only_rejected_drafts():
        for req in harness.scheduler.queues.running:
            assert len(req.pages) <= memory.pages_for(req.num_tokens), req.rid

    assert_same_output(run(harness, after_step=no_page_holds_only_rejected_drafts), reference)
    stats = harness.scheduler.model_step.speculation.stats
    assert stats.num_draft_tokens > 50 and stats.num_accepted_tokens == 0
    cache.evict(cache.num_cached_pages)
    assert allocator.num_free == allocator.num_total
    # The prefix cache held no rejected token's KV: the same requests, now from a warm cache, agree.
    warm = run(harness)
    assert_same_output(warm, reference)


def test_a_failing_proposer_costs_its_drafts_only(tercet_scheduler, reference):
    class Broken(Guesser):
        def propose(self, requests):
            raise RuntimeError("a proposer bug")

    harness = tercet_scheduler([proposer_plugin("broken", Broken({}))], ["speculative.proposer=broken"])
    assert_same_output(run(harness), reference)
    assert harness.scheduler.failures.as_dict()["by_kind"]["speculative_proposer"] > 0


def test_past_max_batch_no_request_speculates(tercet_scheduler, reference):
    guesser = Guesser({rid: entry["tokens"] for rid, entry in reference.items()})
    harness = tercet_scheduler([proposer_plugin("guess", guesser)],
                               ["speculative.proposer=guess", "speculative.max_batch=1"])
    harness.submit("a", PLAIN_PROMPT, greedy())
    harness.submit("b", PLAIN_PROMPT[3:], greedy(max_new_tokens=4))
    harness.step()  # both prefill, then decode together
    harness.step()
    assert guesser.calls == 0
    run_collecting(harness)
    assert guesser.calls > 0  # once one is done, the other speculates alone
