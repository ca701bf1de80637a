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
    scheduler = Scheduler(context, port_args, model_runner)
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
