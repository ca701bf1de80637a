"""The scheduler in-process, over real ZeroMQ sockets, on the tiny model."""

from __future__ import annotations

from tercet.ipc.messages import AbortReq, TokenizedGenerateReq
from tercet.sampling_params import SamplingParams


def greedy(max_new_tokens, **extra):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=1, ignore_eos=True, **extra)


def test_new_requests_join_the_running_batch_in_one_forward(harness):
    harness.send(TokenizedGenerateReq("a", [5, 6, 7, 8, 9], greedy(6)))
    harness.step()
    harness.step()
    harness.send(TokenizedGenerateReq("b", [10, 11, 12], greedy(3)))
    outputs = harness.step()
    joined = harness.forward_calls[-1]
    # One forward carried a's single decode token and b's whole prompt.
    assert joined.extend_lens.tolist() == [1, 3]
    assert set(outputs[0].rids) == {"a", "b"}


def test_pages_return_to_the_pool_on_finish_and_abort(harness):
    allocator = harness.scheduler.model_runner.page_allocator
    baseline = allocator.num_free
    harness.send(TokenizedGenerateReq("done", [1, 2, 3], greedy(2)))
    harness.send(TokenizedGenerateReq("aborted", [4, 5, 6], greedy(50)))
    harness.step()
    assert allocator.num_free < baseline
    harness.step()
    harness.send(AbortReq("aborted"))
    outputs = harness.step()
    reasons = {rid: reason for o in outputs for rid, reason in zip(o.rids, o.finished_reasons) if reason}
    assert reasons["aborted"].kind == "abort"
    assert allocator.num_free == baseline
    assert not harness.scheduler.queues.has_requests


def test_a_request_that_can_never_fit_is_refused(harness):
    harness.send(TokenizedGenerateReq("huge", list(range(1, 200)), greedy(100)))
    outputs = harness.step()
    (reason,) = outputs[0].finished_reasons
    assert reason.kind == "abort" and reason.status_code == 400
    assert "cache.max_total_tokens" in reason.message


def test_decode_out_of_memory_retracts_and_resumes_with_the_same_output(make_harness):
    prompts = {rid: list(range(1 + 10 * i, 21 + 10 * i)) for i, rid in enumerate("abc")}
    alone = {}
    for rid, prompt in prompts.items():
        roomy = make_harness(max_total_tokens=512)
        roomy.send(TokenizedGenerateReq(rid, prompt, greedy(60)))
        alone[rid] = roomy.run_until_finished()[rid]
    # 3 x (20 + 60) tokens cannot all be held by 128 slots at once.
    tight = make_harness(max_total_tokens=128, settings=["cache.prefix_cache=false"])
    for rid, prompt in prompts.items():
        tight.send(TokenizedGenerateReq(rid, prompt, greedy(60)))
    together = tight.run_until_finished()
    assert tight.scheduler.queues.num_retractions > 0
    assert together == alone
    assert tight.scheduler.kv_memory.page_allocator.num_free == tight.scheduler.kv_memory.page_allocator.num_total


def test_stop_token_and_zero_max_tokens(harness):
    harness.send(TokenizedGenerateReq("zero", [1, 2], greedy(0)))
    (output,) = harness.step()
    assert output.new_token_ids == [[]] and output.finished_reasons[0].kind == "length"
    harness.send(TokenizedGenerateReq("probe", [1, 2], greedy(1)))
    (output,) = harness.step()
    first_token = output.new_token_ids[0][0]
    harness.send(TokenizedGenerateReq("stopped", [1, 2], greedy(10, stop_token_ids=[first_token])))
    (output,) = harness.step()
    assert output.finished_reasons[0].kind == "stop" and output.finished_reasons[0].matched_token == first_token


def test_n_completions_prefill_the_prompt_once(harness):
    prompt = list(range(1, 14))
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=9, ignore_eos=True, n=3)
    harness.send(TokenizedGenerateReq("multi", prompt, params))
    outputs = harness.step()
    prefill = harness.forward_calls[-1]
    assert prefill.extend_lens.tolist() == [len(prompt)]
    assert sorted(outputs[0].rids) == ["multi#0", "multi#1", "multi#2"]
    tokens = {}
    for _ in range(10):
        for output in outputs:
            for rid, new_ids in zip(output.rids, output.new_token_ids):
                tokens.setdefault(rid, []).extend(new_ids)
        if harness.scheduler.queues.num_running == 0:
            break
        outputs = harness.step()
    assert all(len(ids) == 4 for ids in tokens.values())
    # Each completion continues from its own first token over a copy of the prompt's KV:
    # the next decode step feeds three sequences of one token each.
    assert harness.forward_calls[1].extend_lens.tolist() == [1, 1, 1]
    assert len({tuple(ids) for ids in tokens.values()}) > 1


def test_greedy_n_completions_match_a_single_greedy_run(harness):
    prompt = list(range(20, 31))
    harness.send(TokenizedGenerateReq("one", prompt, greedy(5)))
    harness.send(TokenizedGenerateReq("three", prompt, greedy(5, n=3)))
    tokens = {}
    for _ in range(10):
        for output in harness.step():
            for rid, new_ids in zip(output.rids, output.new_token_ids):
                tokens.setdefault(rid, []).extend(new_ids)
    assert tokens["three#0"] == tokens["three#1"] == tokens["three#2"] == tokens["one"]


def test_stop_string_finishes_with_the_matched_text(harness):
    tokenizer = harness.scheduler.stop_conditions.tokenizer
    harness.send(TokenizedGenerateReq("probe", [3, 4, 5], greedy(6)))
    probe = []
    for _ in range(8):
        for output in harness.step():
            probe += output.new_token_ids[0]
    text = tokenizer.decode(probe)
    stop = text[len(tokenizer.decode(probe[:2])):][:3]
    assert stop.strip()
    harness.send(TokenizedGenerateReq("stopped", [3, 4, 5], greedy(6, stop=[stop, "never-appears"])))
    reasons = {}
    for _ in range(8):
        for output in harness.step():
            reasons.update({rid: r for rid, r in zip(output.rids, output.finished_reasons) if r})
    assert reasons["stopped"].kind == "stop" and reasons["stopped"].matched_text == stop


def test_abort_of_one_waiting_completion_keeps_the_others(make_harness):
    # Two running requests leave room for one more, not for a group of two.
    harness = make_harness(max_running_requests=3)
    harness.send(TokenizedGenerateReq("full", list(range(1, 21)), greedy(100)))
    harness.send(TokenizedGenerateReq("full2", list(range(1, 21)), greedy(100)))
    harness.send(TokenizedGenerateReq("group", [7, 8, 9], greedy(30, n=2)))
    harness.step()
    (leader,) = [req for req in harness.scheduler.queues.waiting if req.rid.startswith("group")]
    assert [req.rid for req in leader.group] == ["group#0", "group#1"]
    harness.send(AbortReq("group#0"))
    tokens = {}
    reasons = {}
    for _ in range(300):
        for output in harness.step():
            for rid, new_ids, reason in zip(output.rids, output.new_token_ids, output.finished_reasons):
                tokens.setdefault(rid, []).extend(new_ids)
                if reason:
                    reasons[rid] = reason
        if not harness.scheduler.queues.has_requests:
            break
    assert reasons["group#0"].kind == "abort" and tokens["group#0"] == []
    # The other completion led on alone and finished.
    assert reasons["group#1"].kind == "length" and len(tokens["group#1"]) == 30


def test_more_completions_than_the_batch_cap_are_refused(harness):
    harness.send(TokenizedGenerateReq("wide", [1, 2, 3], greedy(3, n=5)))
    (output,) = harness.step()
    assert {reason.status_code for reason in output.finished_reasons} == {400}
    assert "max_running_requests" in output.finished_reasons[0].message
    assert harness.scheduler.queues.waiting == ()


def test_abort_of_a_completion_waiting_for_its_leaders_chunked_prompt(make_harness):
    harness = make_harness(max_total_tokens=1024, settings=["scheduler.chunked_prefill_size=8"])
    harness.send(TokenizedGenerateReq("g", list(range(1, 40)), greedy(4, n=2)))
    harness.step()  # the leader fed its first chunk; the follower waits for the rest
    harness.send(AbortReq("g#1"))
    outputs = harness.run_until_finished()
    assert outputs.get("g#1", []) == [] and len(outputs["g#0"]) == 4


def test_requests_held_by_the_batch_cap_start_when_the_running_one_finishes(make_harness):
    harness = make_harness(max_running_requests=1)
    harness.send(TokenizedGenerateReq("first", [1, 2, 3], greedy(3)))
    harness.send(TokenizedGenerateReq("second", [4, 5, 6], greedy(3)))
    for _ in range(3):
        harness.step()
    assert harness.scheduler.queues.running == () and len(harness.scheduler.queues.waiting) == 1
    # The loop must not sleep now: the waiting request can run.
    assert not harness.scheduler.is_idle
    harness.step()
    assert [req.rid for req in harness.scheduler.queues.running] == ["second"]
    assert not harness.scheduler.is_idle


def test_abort_of_a_leader_whose_completions_wait_for_its_chunked_prompt(make_harness):
    harness = make_harness(max_total_tokens=1024, settings=["scheduler.chunked_prefill_size=8"])
    harness.send(TokenizedGenerateReq("g", list(range(1, 40)), greedy(4, n=3)))
    harness.step()  # the leader fed its first chunk; the other two wait for the rest
    harness.send(AbortReq("g#0"))
    outputs = harness.run_until_finished()
    assert outputs.get("g#0", []) == []
    # The next completion took the lead: both still get their whole (greedy, so equal) output.
    assert len(outputs["g#1"]) == 4 and outputs["g#1"] == outputs["g#2"]
    assert not harness.scheduler.queues.has_requests
