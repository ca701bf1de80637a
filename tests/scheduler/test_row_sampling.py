"""A request whose sampling fails ends alone; the rest of the batch samples exactly as before."""

from __future__ import annotations

import pytest
from containment_helpers import is_internal_failure, run_to_the_end

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.model.sampler import SamplingBatch
from tercet.sampling_params import SamplingParams

POISONED_SEED = 666


def sampled(seed, max_new_tokens=5):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.8, top_k=50, seed=seed, ignore_eos=True)


@pytest.fixture
def poisoned_sampling(monkeypatch):
    """Building a sampling batch fails whenever the poisoned seed's row is in it."""
    original = SamplingBatch.from_params.__func__

    def from_params(cls, params, seeds, steps, *args, **kwargs):
        if POISONED_SEED in seeds:
            raise OverflowError("a value that does not fit")
        return original(cls, params, seeds, steps, *args, **kwargs)

    monkeypatch.setattr(SamplingBatch, "from_params", classmethod(from_params))


def test_one_failing_row_fails_its_request_and_the_others_get_their_own_tokens(make_harness, poisoned_sampling):
    alone = make_harness()
    for rid, seed in (("a", 11), ("b", 12)):
        alone.send(TokenizedGenerateReq(rid, [3, 4, 5, 6], sampled(seed)))
    expected, _ = run_to_the_end(alone)

    harness = make_harness()
    harness.send(TokenizedGenerateReq("a", [3, 4, 5, 6], sampled(11)))
    harness.send(TokenizedGenerateReq("bad", [3, 4, 5, 6], sampled(POISONED_SEED)))
    harness.send(TokenizedGenerateReq("b", [3, 4, 5, 6], sampled(12)))
    tokens, reasons = run_to_the_end(harness)

    assert is_internal_failure(reasons["bad"]) and tokens["bad"] == []
    assert reasons["a"].kind == reasons["b"].kind == "length"
    # Row by row, each request drew what it draws in a batch without the bad one.
    assert tokens["a"] == expected["a"] and tokens["b"] == expected["b"]
    assert harness.scheduler.failures.as_dict()["by_kind"]["sampling"] >= 2  # the batch, then the row
    memory = harness.scheduler.kv_memory
    # The failed request's KV was freed too (what the prefix cache keeps is evictable).
    assert memory.num_available_pages == memory.page_allocator.num_total
    assert memory.req_to_token_pool.num_free == alone.scheduler.kv_memory.req_to_token_pool.num_free


def test_a_failing_completion_of_several_ends_only_itself(make_harness, poisoned_sampling):
    harness = make_harness()
    # Completion 0 keeps the request's seed; the others derive theirs from it.
    harness.send(TokenizedGenerateReq("group", [3, 4, 5], SamplingParams(
        max_new_tokens=3, temperature=0.8, seed=POISONED_SEED, ignore_eos=True, n=2)))
    tokens, reasons = run_to_the_end(harness)
    assert is_internal_failure(reasons["group#0"])
    assert reasons["group#1"].kind == "length" and len(tokens["group#1"]) == 3
