"""The step's prompt-token budget: whole while nothing decodes, sized by the measured costs while requests do."""

from __future__ import annotations

import pytest

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.sampling_params import SamplingParams
from tercet.scheduler.prefill_budget import MIN_CHUNK_TOKENS, PrefillBudget


def test_with_nothing_decoding_a_step_takes_the_whole_chunked_prefill_size():
    budget = PrefillBudget(4096, 2.0)
    budget.record(num_decoding=4, prompt_tokens=0, seconds=0.030)
    budget.record(num_decoding=0, prompt_tokens=1000, seconds=1.0)
    assert budget.tokens(num_decoding=0) == 4096


def test_before_any_prompt_step_is_seen_the_whole_size_is_allowed():
    budget = PrefillBudget(4096, 2.0)
    budget.record(num_decoding=8, prompt_tokens=0, seconds=0.030)
    assert budget.tokens(num_decoding=8) == 4096


def test_while_requests_decode_a_step_adds_at_most_the_slowdown_in_prompt_tokens():
    # Decode-only steps of 30 ms; a prompt token costs 1 ms on top of the decoding: a step at most twice a
    # decode step has room for 30 prompt tokens, three times for 60.
    budget = PrefillBudget(4096, 2.0)
    budget.record(num_decoding=8, prompt_tokens=0, seconds=0.030)
    budget.record(num_decoding=8, prompt_tokens=100, seconds=0.130)
    assert budget.tokens(num_decoding=8) == max(MIN_CHUNK_TOKENS, 30)
    budget = PrefillBudget(4096, 4.0)
    budget.record(num_decoding=8, prompt_tokens=0, seconds=0.030)
    budget.record(num_decoding=8, prompt_tokens=100, seconds=0.130)
    assert budget.tokens(num_decoding=8) == 90


def test_the_costs_follow_the_newest_steps():
    budget = PrefillBudget(4096, 5.0)
    budget.record(num_decoding=8, prompt_tokens=0, seconds=0.040)
    budget.record(num_decoding=0, prompt_tokens=400, seconds=0.400)  # 1 ms a token
    assert budget.tokens(num_decoding=8) == 160
    for _ in range(30):  # deeper into a long prompt, a token costs 4 ms
        budget.record(num_decoding=8, prompt_tokens=50, seconds=0.040 + 50 * 0.004)
    assert budget.tokens(num_decoding=8) == pytest.approx(40, abs=1)


def test_a_budget_never_exceeds_chunked_prefill_size_nor_falls_below_the_least_chunk():
    budget = PrefillBudget(16, 2.0)
    budget.record(num_decoding=1, prompt_tokens=0, seconds=1.0)
    budget.record(num_decoding=1, prompt_tokens=10, seconds=1.0 + 10e-6)
    assert budget.tokens(num_decoding=1) == 16
    budget = PrefillBudget(4096, 2.0)
    budget.record(num_decoding=1, prompt_tokens=0, seconds=0.001)
    budget.record(num_decoding=1, prompt_tokens=10, seconds=10.0)
    assert budget.tokens(num_decoding=1) == MIN_CHUNK_TOKENS


def test_zero_turns_the_measured_budget_off():
    budget = PrefillBudget(4096, 0.0)
    budget.record(num_decoding=8, prompt_tokens=0, seconds=0.030)
    budget.record(num_decoding=8, prompt_tokens=100, seconds=10.0)
    assert budget.tokens(num_decoding=8) == 4096


def _greedy(max_new_tokens):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)


LONG_PROMPT = [(7 * i) % 500 + 3 for i in range(300)]


def test_a_prompt_arriving_while_a_request_decodes_is_chunked_to_the_budget_and_answers_the_same(make_harness):
    # A slowdown of 1 leaves no room for prompt tokens beside decoding: the fewest a step takes.
    harness = make_harness(max_total_tokens=2048, settings=["scheduler.max_decode_slowdown=1"])
    harness.send(TokenizedGenerateReq("streaming", [5, 6, 7, 8], _greedy(60)))
    for _ in range(3):  # its prefill, then decode steps: both costs are seen
        harness.step()
    calls_before = len(harness.forward_calls)
    harness.send(TokenizedGenerateReq("long", LONG_PROMPT, _greedy(4)))
    chunked = harness.run_until_finished()["long"]
    # The long prompt's rows of each step (the streaming request's single row beside them).
    chunks = [max(call.extend_lens.tolist()) for call in harness.forward_calls[calls_before:]]
    chunks = [chunk for chunk in chunks if chunk > 1]
    assert sum(chunks) == len(LONG_PROMPT)
    assert chunks[:-1] == [MIN_CHUNK_TOKENS] * (len(chunks) - 1) and chunks[-1] <= MIN_CHUNK_TOKENS

    alone = make_harness(max_total_tokens=2048)
    alone.send(TokenizedGenerateReq("long", LONG_PROMPT, _greedy(4)))
    assert alone.run_until_finished()["long"] == chunked
