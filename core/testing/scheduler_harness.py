"""A real Scheduler driven in-process, step by step, over real ZeroMQ sockets.

No process is started: the test holds the scheduler and both ends of its
sockets. It sends requests (``submit``, or any message with ``send``), runs
the scheduler's loop one step at a time (``step``, ``run_until_finished``) and
reads what the scheduler sent the detokenizer, and the replies to control
requests (``control``). Everything else is the real thing: the config is
resolved as ``tercet serve`` resolves it, plugins come from the entry points
(plus any passed in), and the model runner and the scheduler are built from the
config as a scheduler process builds them (``build_model_runner``,
:func:`tercet.scheduler.assembly.build_scheduler`), so a policy, serializer, transport, attention
backend, linear method, grammar backend or message handler chosen in
``settings`` is the one that runs.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Sequence

from tercet.ipc.messages import BatchEmbeddingOutput


def build_scheduler_harness(
    model_dir: Path,
    plugins: Sequence[object] = (),
    settings: Sequence[str] = (),
    max_total_tokens: int = 256,
    page_size: int = 8,
    max_running_requests: int = 4,
) -> "SchedulerHarness":
    """A scheduler on ``model_dir`` (float32, CPU) with the installed plugins and ``plugins``
    (modules or objects with hook implementations, registered as-is); ``settings`` are
    ``section.key=value`` strings, as for ``--set``."""
    import zmq

    from tercet.config import load_config, parse_set_options
    from tercet.ipc.channels import MessageReceiver, MessageSender
    from tercet.ipc.port_args import PortArgs
    from tercet.plugin_host.manager import create_plugin_manager
    from tercet.processes.context import ProcessContext
    from tercet.scheduler.assembly import build_scheduler
    from tercet.scheduler.process import build_model_runner
    from tercet.tokenizer.loading import load_tokenizer

    config = load_config(environ={}, overrides=parse_set_options([
        f"model.path={model_dir}", "model.dtype=float32",
        f"cache.max_total_tokens={max_total_tokens}", f"cache.page_size={page_size}",
        f"scheduler.max_running_requests={max_running_requests}", *settings,
    ]))
    plugin_manager = create_plugin_manager(extra_plugins=plugins, disabled=config.disabled_plugins)
    context = ProcessContext.create(config, plugin_manager)
    port_args = PortArgs.create(context.create_transport())
    zmq_context = zmq.Context.instance()
    # The test's ends of the scheduler's edges: both bound before the scheduler connects.
    outputs = MessageReceiver(zmq_context, port_args.detokenizer_input, context.create_serializer())
    replies = MessageReceiver(zmq_context, port_args.tokenizer_input, context.create_serializer())
    scheduler = build_scheduler(context, port_args, build_model_runner(context), load_tokenizer(model_dir))
    to_scheduler = MessageSender(zmq_context, port_args.scheduler_input, context.create_serializer())
    return SchedulerHarness(scheduler, to_scheduler, outputs, replies, port_args)


class SchedulerHarness:
    def __init__(self, scheduler, to_scheduler, outputs, replies, port_args):
        self.scheduler = scheduler
        self.to_scheduler = to_scheduler
        self.outputs = outputs
        self.replies = replies
        self.port_args = port_args
        # Every batch the model ran, in order (a test can see what shared a forward).
        self.forward_calls = []
        # Request ids in the order they finished.
        self.finished_rids: list[str] = []
        # Each generating request's cached prompt tokens, as its latest output reported them.
        self.cached_tokens: dict[str, int] = {}
        # The inputs of every embedding forward, in order (lists of token-id lists).
        self.embed_calls = []
        self.num_sent = self.num_received = 0
        runner = scheduler.model_runner
        forward, embed = getattr(runner, "forward", None), runner.embed

        def counting_forward(batch):
            self.forward_calls.append(batch)
            return forward(batch)

        def counting_embed(sequences, *rows):
            self.embed_calls.append([list(sequence) for sequence in sequences])
            return embed(sequences, *rows)

        if forward is not None:  # an encoder has no generating forward
            runner.forward = counting_forward
        runner.embed = counting_embed

    def send(self, message) -> None:
        """Any registered message, as the TokenizerManager would send it (delivered on the next step)."""
        self.to_scheduler.send(message)
        self.num_sent += 1

    def submit(self, rid: str, input_ids: Sequence[int], sampling_params=None, *, priority: int = 0,
               tenant: str | None = None, lora_name: str | None = None) -> None:
        """A tokenized generate request (default: 8 greedy tokens, not stopping at EOS), with the
        LoRA adapter ``lora_name`` if given."""
        from tercet.ipc.messages import TokenizedGenerateReq
        from tercet.sampling_params import SamplingParams

        if sampling_params is None:
            sampling_params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
        self.send(TokenizedGenerateReq(rid, list(input_ids), sampling_params, priority=priority, tenant=tenant,
                                       lora_name=lora_name))

    def embed(self, rid: str, input_ids: Sequence[int]) -> None:
        """A tokenized embedding request."""
        from tercet.ipc.messages import TokenizedEmbeddingReq

        self.send(TokenizedEmbeddingReq(rid, list(input_ids)))

    def deliver(self) -> None:
        """Hand the scheduler everything sent so far, as its loop would when it is already queued."""
        while self.num_received < self.num_sent:
            if not self.scheduler.receiver.poll(5000):
                raise TimeoutError(f"{self.num_sent - self.num_received} sent messages never reached the scheduler")
            for message in self.scheduler.receiver.receive_pending():
                self.scheduler.dispatch(message)
                self.num_received += 1

    def step(self) -> list:
        """Deliver, run one scheduler step; the BatchTokenIDOutputs (and BatchEmbeddingOutputs) it
        sent the detokenizer."""
        self.deliver()
        # A grammar compiles in a pool thread: wait for it (the real loop polls instead).
        concurrent.futures.wait([entry.future for entry in self.scheduler.grammars.pending])
        tiers = self.scheduler.kv_memory.kv_tiers
        if tiers is not None:  # so do prefixes read back from the tier below the pool
            tiers.promotion.wait()
        self.scheduler.run_step()
        outputs = self.outputs.receive_pending() if self.outputs.poll(1000) else []
        for output in outputs:
            reasons = output.refusals if isinstance(output, BatchEmbeddingOutput) else output.finished_reasons
            # An embedding's output is always its last.
            self.finished_rids += [
                rid for rid, reason in zip(output.rids, reasons) if reason or isinstance(output, BatchEmbeddingOutput)
            ]
            if not isinstance(output, BatchEmbeddingOutput):
                self.cached_tokens.update(zip(output.rids, output.cached_tokens))
        return outputs

    def is_idle(self) -> bool:
        scheduler = self.scheduler
        return not (scheduler.queues.has_requests or scheduler.grammars.pending or scheduler.queues.num_waiting_embeddings)

    def run_embeddings(self, max_steps: int = 100) -> dict[str, tuple]:
        """Step until nothing runs or waits; each embedding request's ``(vector as a float32
        numpy array, or None, refusal)`` (generation outputs are dropped)."""
        import numpy

        results: dict[str, tuple] = {}
        for _ in range(max_steps):
            for output in self.step():
                if isinstance(output, BatchEmbeddingOutput):
                    for rid, vector, refusal in zip(output.rids, output.embeddings, output.refusals):
                        results[rid] = (numpy.frombuffer(vector, dtype="<f4") if vector else None, refusal)
            if self.is_idle():
                return results
        raise AssertionError(f"embeddings did not finish in {max_steps} steps")

    def run_until_finished(self, max_steps: int = 1000) -> dict[str, list[int]]:
        """Step until nothing runs or waits; every request's output ids."""
        tokens: dict[str, list[int]] = {}
        for _ in range(max_steps):
            for output in self.step():
                if isinstance(output, BatchEmbeddingOutput):
                    continue
                for rid, new_ids in zip(output.rids, output.new_token_ids):
                    tokens.setdefault(rid, []).extend(new_ids)
            if self.is_idle():
                return tokens
        raise AssertionError(f"requests did not finish in {max_steps} steps")

    def control(self, request, timeout_ms: int = 5000):
        """Send a control request (a ControlRequest, a plugin's own included); the scheduler's ControlReply."""
        self.send(request)
        self.deliver()
        if not self.replies.poll(timeout_ms):
            raise TimeoutError(f"no reply to {type(request).__name__} in {timeout_ms} ms")
        (reply,) = [reply for reply in self.replies.receive_pending() if reply.request_id == request.request_id]
        return reply

    def close(self) -> None:
        self.to_scheduler.close()
        self.outputs.close()
        self.replies.close()
        self.scheduler.close()
        self.port_args.remove_runtime_dir()
