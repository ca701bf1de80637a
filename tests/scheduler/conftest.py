"""A scheduler driven in-process over real ZeroMQ sockets, on the tiny model."""

from __future__ import annotations

import concurrent.futures

import pytest
import zmq

from tercet.channels import MessageReceiver, MessageSender
from tercet.config import load_config, parse_set_options
from tercet.model.model_runner import ModelRunner
from tercet.port_args import PortArgs
from tercet.process_context import ProcessContext
from tercet.scheduler.scheduler import Scheduler
from tercet.tokenizer import load_tokenizer


def build_harness(model_dir, max_total_tokens=256, page_size=8, max_running_requests=4, settings=()):
    config = load_config(environ={}, overrides=parse_set_options([
        f"cache.max_total_tokens={max_total_tokens}", f"cache.page_size={page_size}",
        f"scheduler.max_running_requests={max_running_requests}", *settings,
    ]))
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    model_runner = ModelRunner(
        model_dir, "float32", "cpu", context.registries.attention_backends.get("torch_native"),
        max_total_tokens=max_total_tokens, page_size=page_size, max_running_requests=max_running_requests,
    )
    outputs = MessageReceiver(zmq.Context.instance(), port_args.detokenizer_input, context.create_serializer())
    scheduler = Scheduler(context, port_args, model_runner, load_tokenizer(model_dir))
    to_scheduler = MessageSender(zmq.Context.instance(), port_args.scheduler_input, context.create_serializer())
    harness = Harness(scheduler, to_scheduler, outputs)

    def close():
        to_scheduler.close()
        outputs.close()
        scheduler.close()
        port_args.remove_runtime_dir()

    harness.close = close
    return harness


@pytest.fixture
def make_harness(tiny_llama_dir):
    built = []

    def make(**options):
        built.append(build_harness(tiny_llama_dir, **options))
        return built[-1]

    yield make
    for harness in built:
        harness.close()


@pytest.fixture
def harness(make_harness):
    return make_harness()


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

    def run_until_finished(self, max_steps=1000):
        """Step until nothing runs or waits; every request's output ids."""
        tokens = {}
        for _ in range(max_steps):
            for output in self.step():
                for rid, new_ids in zip(output.rids, output.new_token_ids):
                    tokens.setdefault(rid, []).extend(new_ids)
            if not (self.scheduler.queues.has_requests or self.scheduler.grammars.pending):
                return tokens
        raise AssertionError("requests did not finish")

    def step(self):
        # Everything sent so far reaches the scheduler before the step, as in
        # its own loop when the messages are already queued.
        while self.num_received < self.num_sent:
            assert self.scheduler.receiver.poll(5000)
            for message in self.scheduler.receiver.receive_pending():
                self.scheduler.dispatch(message)
                self.num_received += 1
        # A grammar compiles in a worker thread: wait for it (the real loop polls instead).
        concurrent.futures.wait([future for _, future in self.scheduler.grammars.pending])
        self.scheduler.run_step()
        return [m for m in self.outputs.receive_pending()] if self.outputs.poll(1000) else []
