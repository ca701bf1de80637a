"""The scheduler in-process, over real ZeroMQ sockets, on the tiny model."""

from __future__ import annotations

import pytest
import zmq

from tercet.channels import MessageReceiver, MessageSender
from tercet.config import load_config, parse_set_options
from tercet.messages import AbortReq, TokenizedGenerateReq
from tercet.model.model_runner import ModelRunner
from tercet.port_args import PortArgs
from tercet.process_context import ProcessContext
from tercet.sampling_params import SamplingParams
from tercet.scheduler.scheduler import Scheduler
from tercet.tokenizer import load_tokenizer


@pytest.fixture
def harness(tiny_llama_dir):
    config = load_config(environ={}, overrides=parse_set_options(
        ["cache.max_total_tokens=256", "cache.page_size=8", "scheduler.max_running_requests=4"]
    ))
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    model_runner = ModelRunner(
        tiny_llama_dir, "float32", "cpu", context.registries.attention_backends.get("torch_native"),
        max_total_tokens=256, page_size=8, max_running_requests=4,
    )
    outputs = MessageReceiver(zmq.Context.instance(), port_args.detokenizer_input, context.create_serializer())
    scheduler = Scheduler(context, port_args, model_runner, load_tokenizer(tiny_llama_dir))
    to_scheduler = MessageSender(zmq.Context.instance(), port_args.scheduler_input, context.create_serializer())
    yield Harness(scheduler, to_scheduler, outputs)
    to_scheduler.close()
    outputs.close()
    scheduler.close()
    port_args.remove_runtime_dir()


class Harness:
    def __init__(self, scheduler, to_scheduler, outputs):
        self.scheduler = scheduler
        self.to_scheduler = to_scheduler
        self.outputs = outputs
        self.forward_calls = []
        self.num_sent = self.num_received = 0
        forward = scheduler.model_runner.forward

        def counting_forward(batch):
            self.forward_calls.append(batch)
            return forward(batch)

        scheduler.model_runner.forward = counting_forward

    def send(self, message):
        self.to_scheduler.send(message)
        self.num_sent += 1

    def step(self):
        # Everything sent so far reaches the scheduler before the step, as in
        # its own loop when the messages are already queued.
        while self.num_received < self.num_sent:
            assert self.scheduler.receiver.poll(5000)
            for message in self.scheduler.receiver.receive_pending():
                self.scheduler.dispatcher(message)
                self.num_received += 1
        self.scheduler.run_step()
        return [m for m in self.outputs.receive_pending()] if self.outputs.poll(1000) else []


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
    assert harness.scheduler.running == [] and harness.scheduler.waiting == []


def test_a_request_that_can_never_fit_is_refused(harness):
    harness.send(TokenizedGenerateReq("huge", list(range(1, 200)), greedy(100)))
    outputs = harness.step()
    (reason,) = outputs[0].finished_reasons
    assert reason.kind == "abort" and reason.status_code == 400
    assert "cache.max_total_tokens" in reason.message


def test_requests_wait_for_memory_then_run(harness):
    # Each may hold 119 tokens, 15 of the 32 pages: two fit, the third waits for memory.
    for rid in "abc":
        harness.send(TokenizedGenerateReq(rid, list(range(1, 21)), greedy(100)))
    harness.step()
    assert len(harness.scheduler.running) == 2 and len(harness.scheduler.waiting) == 1
    finished = set()
    for _ in range(220):
        for output in harness.step():
            finished |= {rid for rid, reason in zip(output.rids, output.finished_reasons) if reason}
        if finished == set("abc"):
            break
    assert finished == set("abc")


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
        if len(harness.scheduler.running) == 0:
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


def test_abort_of_one_waiting_completion_keeps_the_others(harness):
    harness.send(TokenizedGenerateReq("full", list(range(1, 21)), greedy(100)))
    harness.send(TokenizedGenerateReq("full2", list(range(1, 21)), greedy(100)))
    harness.send(TokenizedGenerateReq("group", [7, 8, 9], greedy(30, n=2)))
    harness.step()
    (leader,) = [req for req in harness.scheduler.waiting if req.rid.startswith("group")]
    assert [req.rid for req in leader.group] == ["group#0", "group#1"]
    harness.send(AbortReq("group#0"))
    harness.step()
    (successor,) = [req for req in harness.scheduler.waiting if req.rid.startswith("group")]
    assert successor.rid == "group#1" and successor.followers == []
