"""Prefix cache and chunked prefill in the scheduler: same greedy outputs, less prefill."""

import pytest

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.sampling_params import SamplingParams

SYSTEM_PROMPT = list(range(100, 164))  # 64 shared tokens


def greedy(max_new_tokens):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=1, ignore_eos=True)


def shared_prefix_workload(harness, arrivals_between=True):
    outputs = {}
    for index in range(4):
        harness.send(TokenizedGenerateReq(f"r{index}", SYSTEM_PROMPT + [500 + index, 600 + index, 700], greedy(6)))
        if arrivals_between:
            outputs.update(harness.run_until_finished())
    outputs.update(harness.run_until_finished())
    return outputs


def cached_tokens_of(harness):
    return harness.cached_tokens


def test_prefix_cache_gives_the_same_outputs_and_reports_cached_tokens(make_harness):
    with_cache = make_harness(max_total_tokens=1024)
    without_cache = make_harness(max_total_tokens=1024, settings=["cache.prefix_cache=false"])
    assert shared_prefix_workload(with_cache) == shared_prefix_workload(without_cache)
    assert with_cache.cached_tokens["r0"] == 0
    assert all(with_cache.cached_tokens[f"r{i}"] == 64 for i in (1, 2, 3))
    assert set(without_cache.cached_tokens.values()) == {0}
    # Later requests fed only their own suffix.
    fed_prompt_lengths = [batch.extend_lens.tolist()[0] for batch in with_cache.forward_calls if batch.max_extend_len > 1]
    assert fed_prompt_lengths == [67, 3, 3, 3]


def test_unreferenced_cached_prefixes_are_evicted_when_memory_is_short(make_harness):
    harness = make_harness(max_total_tokens=128)
    for index in range(6):
        harness.send(TokenizedGenerateReq(f"d{index}", [1000 + 100 * index + t for t in range(40)], greedy(4)))
        harness.run_until_finished()
    allocator = harness.scheduler.kv_memory.page_allocator
    assert allocator.num_free + harness.scheduler.prefix_cache.num_evictable_pages == allocator.num_total


def test_chunked_prefill_matches_unchunked_and_keeps_decoding(make_harness):
    long_prompt = list(range(200, 300))
    chunked = make_harness(max_total_tokens=1024, settings=["scheduler.chunked_prefill_size=16", "cache.prefix_cache=false"])
    whole = make_harness(max_total_tokens=1024, settings=["cache.prefix_cache=false"])
    results = []
    for harness in (chunked, whole):
        harness.send(TokenizedGenerateReq("decoder", [5, 6, 7], greedy(30)))
        harness.step()
        harness.step()
        harness.send(TokenizedGenerateReq("long", long_prompt, greedy(5)))
        results.append(harness.run_until_finished())
    assert results[0] == results[1]
    # While the long prompt was prefilled 16 tokens a step, the decoder was fed in every one of those steps.
    prefill_steps = [b for b in chunked.forward_calls if b.batch_size == 2 and b.max_extend_len > 1]
    assert len(prefill_steps) == 100 // 16 + 1
    assert all(b.extend_lens.tolist()[0] == 1 and b.extend_lens.tolist()[1] <= 16 for b in prefill_steps)


def test_prompt_logprobs_are_whole_when_the_prompt_is_chunked(make_harness):
    prompt = list(range(300, 350))
    params = SamplingParams(max_new_tokens=0, temperature=0.0, seed=1, return_prompt_logprob=True, top_logprobs_num=2)
    results = []
    for chunk in (8, 4096):
        harness = make_harness(max_total_tokens=1024, settings=[f"scheduler.chunked_prefill_size={chunk}"])
        harness.send(TokenizedGenerateReq("echo", prompt, params))
        logprobs = None
        for _ in range(20):
            for output in harness.step():
                logprobs = output.prompt_logprobs[0] or logprobs
            if not harness.scheduler.queues.has_requests:
                break
        results.append(logprobs)
    chunked, whole = results
    assert len(whole.token_ids) == len(prompt) == len(chunked.token_ids)
    assert chunked.token_ids == whole.token_ids == prompt
    assert chunked.logprobs[0] is None
    assert chunked.logprobs[1:] == pytest.approx(whole.logprobs[1:], abs=1e-4)
