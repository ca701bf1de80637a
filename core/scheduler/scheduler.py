"""The scheduler: admits requests, runs one model step for the whole batch, emits tokens.

Each step feeds, in ONE forward pass, a chunk of every prefilling request's
prompt (within ``[scheduler] chunked_prefill_size`` tokens a step) together
with the last sampled token of every decoding request (continuous batching:
new requests join the running batch between steps, and a long prompt never
stalls the decoders for more than one chunk). KV pages are taken as tokens are
fed; when decoding would run out, the newest requests are retracted to the
waiting queue with their output so far, and resume later.

Failures are contained (see :mod:`tercet.containment`): a message that no
handler takes or whose handler raises is dropped; a request that cannot be set
up, sampled, stop-checked or output fails alone with an error its client
receives; a scheduling policy that raises is bypassed for that step. Only a
failure that leaves shared state unknown ends the process: the model forward
and the KV cache bookkeeping (page allocator, request-to-token table, prefix
cache), since after one of those no request's KV can be trusted.
"""

from __future__ import annotations

import logging
import secrets

from tercet.context_length import context_length_problem
from tercet.errors import RequestError
from tercet.ipc.control_messages import ControlRequest
from tercet.ipc.messages import (
    AbortReq,
    FinishKind,
    FinishReason,
    TokenizedEmbeddingReq,
    TokenizedGenerateReq,
    choice_rid,
)
from tercet.sampling_params import MAX_N, SamplingParams
from tercet.scheduler.control import answer, builtin_control_handlers
from tercet.scheduler.embeddings import send_embedding_outputs
from tercet.scheduler.intake import check_generate_request
from tercet.scheduler.output import send_outputs_contained
from tercet.scheduler.parts import SchedulerParts
from tercet.scheduler.req import Req

logger = logging.getLogger(__name__)
# How often an otherwise idle loop looks for a finished grammar compile.
GRAMMAR_POLL_MS = 2


def completion_seed(seed: int, index: int) -> int:
    """Distinct, reproducible seeds for the n completions of one request."""
    return seed if index == 0 else (seed * 1_000_003 + index) % (1 << 63)


class Scheduler:
    """Drives its parts, made outside it (:func:`tercet.scheduler.assembly.build_scheduler`): the loop,
    and the handlers of what arrives on edge 1."""

    def __init__(self, parts: SchedulerParts):
        self.config = parts.config
        self.rank = parts.rank
        self.model_runner = parts.model_runner
        self.failures = parts.failures
        self.timer = parts.timer
        self.heartbeat = parts.heartbeat
        self.cpu_threads = parts.cpu_threads
        self.kv_memory = parts.kv_memory
        self.queues = parts.queues
        self.admission = parts.admission
        self.grammars = parts.grammars
        self.model_step = parts.model_step
        self.embedding_step = parts.embedding_step
        self.adapters = parts.adapters
        self.control_target = parts.control_target
        self.metrics_reporter = parts.metrics_reporter
        self.eviction_reporter = parts.eviction_reporter
        edges = parts.edges
        self.io, self.receiver, self.inbox = edges.io, edges.receiver, edges.inbox
        self.sender_to_detokenizer, self.sender_to_tokenizer = edges.sender_to_detokenizer, edges.sender_to_tokenizer
        self.io.set_handlers(self._message_handlers())
        self.waiting_is_stuck = False

    def _message_handlers(self) -> list[tuple[type, object]]:
        control_handlers = [
            *builtin_control_handlers(self.control_target),
            # Plugins' handlers see a snapshot of the rank's figures, never the scheduler itself.
            *self.io.plugin_handlers(self.control_target.stats),
        ]
        return [
            (TokenizedGenerateReq, self.handle_generate_request),
            (TokenizedEmbeddingReq, self.embedding_step.handle),
            (AbortReq, self.handle_abort_request),
            *[(message_type, self.replying(handler)) if issubclass(message_type, ControlRequest)
              else (message_type, handler) for message_type, handler in control_handlers],
        ]

    @property
    def stop_conditions(self):
        """When a request ends: EOS, stop tokens and strings, lengths (the model step checks them)."""
        return self.model_step.stop_conditions

    @property
    def prefix_cache(self):
        """The radix prefix cache (:class:`tercet.scheduler.radix_cache.RadixCache`); None when off."""
        return self.kv_memory.prefix_cache

    @property
    def policy(self):
        """The scheduling policy, contained (:class:`tercet.scheduler.contained_policy.ContainedPolicy`)."""
        return self.admission.policy

    # -- the loop ---------------------------------------------------------

    def run_forever(self) -> None:
        while True:
            idle = self.is_idle
            if idle:
                self.heartbeat.rest()
            # Evictions first: a metrics report sent after them tells a reader they have arrived.
            if self.eviction_reporter is not None:
                self.eviction_reporter.between_steps()
            self.metrics_reporter.between_steps(resting=idle)
            self.receive_and_dispatch(block=idle)
            self.heartbeat.beat()
            if self.cpu_threads is not None:
                self.cpu_threads.check()
            self.run_step()
            self.timer.end_step()

    def receive_and_dispatch(self, block: bool) -> None:
        if self.inbox is not None:
            poll_ms = GRAMMAR_POLL_MS if self.has_background_work else None
            with self.timer.stage("receive"):
                for message in self.inbox.take(block, poll_ms):
                    self.dispatch(message)
            return
        if block:
            # A grammar compiling in its thread: look again soon rather than wait for a message.
            self.receiver.poll(timeout_ms=GRAMMAR_POLL_MS if self.has_background_work else None)
        with self.timer.stage("receive"):
            self.io.dispatch_pending()

    @property
    def has_background_work(self) -> bool:
        """A grammar compiling, or a waiting request's prefix read back, in a thread: look again soon
        rather than wait for a message."""
        return bool(self.grammars.pending) or self.admission.is_reading_prefixes

    def dispatch(self, message) -> None:
        """Handle one message as the loop does (see the loop-error policy in tercet.processes.manager_io)."""
        self.io.dispatch(message)

    @property
    def is_idle(self) -> bool:
        """Nothing can change until a message arrives: sleep until one does."""
        queues = self.queues
        if queues.is_paused:
            return True
        waiting_can_move = queues.waiting and not self.waiting_is_stuck
        return not queues.running and not waiting_can_move and not queues.num_waiting_embeddings

    def run_step(self) -> None:
        if self.grammars.pending:
            self.admit_compiled_grammars()
        if not self.queues.is_paused:
            if self.queues.num_waiting_embeddings:
                # Embeddings first: each batch takes one forward and frees what it borrowed at once.
                self.embedding_step.run()
            with self.timer.stage("schedule"):
                admitted = self.admission.admit_waiting_requests()
            # Nothing runs and nothing could be admitted: only a message (an abort,
            # a new request, a control request) can change that.
            self.waiting_is_stuck = not admitted and not self.queues.running
            if self.queues.running:
                self.model_step.run()
                self.control_target.after_model_step()
        self.send_outputs()

    def replying(self, handler):
        """Wrap a control handler: its result (or failure) goes back as a ControlReply."""
        return lambda message: self.sender_to_tokenizer.send_reply(answer(self.control_target, message, handler))

    # -- message handlers -------------------------------------------------

    def handle_generate_request(self, message: TokenizedGenerateReq) -> None:
        try:
            if not self.model_runner.can_generate:
                raise RequestError("this model is encoder-only: it cannot generate; it serves /v1/embeddings", "model")
            check_generate_request(message, self.model_runner.vocab_size)
            self.use_adapter(message.lora_name)
            group = self.request_group(message)
        except RequestError as error:
            self.refuse(message, FinishReason(FinishKind.ABORT, message=error.message, status_code=error.status_code))
            return
        except Exception:
            self.failures.record("generate_request", f"setting up request {message.rid!r} failed")
            self.refuse(message, FinishReason.internal_failure("setting up the request"))
            return
        reason = self.why_it_can_never_run(group)
        if reason is not None:
            self.finish_group(group, reason)
            return
        if message.sampling_params.constraint is not None:
            self.queues.hold_for_grammar(group)
            self.grammars.submit(group)  # joins the waiting queue once compiled
            return
        self.queues.enqueue(group[0])

    def use_adapter(self, name: str | None) -> None:
        """Make sure the request's adapter is held (404 when there is no such adapter)."""
        if name is None:
            return
        if self.adapters is None:
            raise RequestError(f"no LoRA adapter named {name!r}: this server serves none (see [lora])", "lora_name",
                               404)
        self.adapters.use(name)

    def admit_compiled_grammars(self) -> None:
        for group, error in self.grammars.take_ready():
            if error is None:
                self.queues.enqueue(group[0])
                continue
            status, message = error
            kind = group[0].sampling_params.constraint[0]
            reason = FinishReason(FinishKind.ABORT, message=f"{kind}: {message}", status_code=status, param=kind)
            self.finish_group(group, reason)

    def finish_group(self, group: list[Req], reason: FinishReason) -> None:
        """End every completion of a group that never reached the queues (refused, or its grammar failed)."""
        for req in group:
            self.queues.finish(req, reason)

    def request_group(self, message: TokenizedGenerateReq) -> list[Req]:
        """The n completions of one prompt: a leader, and followers waiting inside it."""
        params = message.sampling_params
        # The TokenizerManager always fixes a seed; another sender may not.
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        arrival_index = self.queues.next_arrival_index()
        group = [
            Req(choice_rid(message.rid, index, params.n), list(message.input_ids), params, arrival_index,
                priority=message.priority, tenant=message.tenant, seed=completion_seed(seed, index),
                lora_name=message.lora_name)
            for index in range(params.n)
        ]
        group[0].lead(group[1:])
        logger.debug(
            "request %s: %d prompt tokens, n=%d, priority %d, tenant %s",
            message.rid, len(message.input_ids), params.n, message.priority, message.tenant,
        )
        return group

    def why_it_can_never_run(self, group: list[Req]) -> FinishReason | None:
        if len(group) > self.admission.max_running_requests:
            return FinishReason(FinishKind.ABORT, status_code=400,
                message=f"n={len(group)} completions cannot run together: "
                f"scheduler.max_running_requests is {self.admission.max_running_requests}",
            )
        needed_pages = sum(self.kv_memory.pages_for(req.max_num_tokens) for req in group)
        if needed_pages > self.kv_memory.page_allocator.num_total:
            return FinishReason(FinishKind.ABORT,
                message=f"the request needs {sum(req.max_num_tokens for req in group)} KV cache tokens "
                f"(prompt + max_tokens, for each of n) but the whole cache holds "
                f"{self.kv_memory.capacity_tokens} (cache.max_total_tokens)",
                status_code=400,
            )
        leader = group[0]
        problem = context_length_problem(
            len(leader.input_ids), leader.sampling_params.max_new_tokens, self.model_runner.context_len
        )
        return None if problem is None else FinishReason(FinishKind.ABORT, message=problem, status_code=400)

    def refuse(self, message: TokenizedGenerateReq, reason: FinishReason) -> None:
        """End a request the scheduler holds nothing for yet: every completion id
        its sender waits on gets ``reason``."""
        n = getattr(message.sampling_params, "n", 1)
        n = n if isinstance(n, int) and 1 <= n <= MAX_N else 1
        for index in range(n):
            req = Req(choice_rid(message.rid, index, n), list(message.input_ids), SamplingParams(), -1)
            self.queues.finish(req, reason)

    def handle_abort_request(self, message: AbortReq) -> None:
        reason = FinishReason(FinishKind.ABORT, message="aborted")
        # The rest of a compiling group ends too: it was never started.
        for group in self.grammars.drop({message.rid}):
            self.finish_group(group, reason)
        self.queues.abort(message.rid, reason)

    # -- output -----------------------------------------------------------

    def send_outputs(self) -> None:
        embedding_rows = self.queues.take_embedding_outputs()
        if embedding_rows:
            with self.timer.stage("output"):
                send_embedding_outputs(embedding_rows, self.sender_to_detokenizer)
        ready = self.queues.take_outputs_to_send()
        if ready:
            with self.timer.stage("output"):
                send_outputs_contained(ready, self.sender_to_detokenizer, self.failures, self.queues)

    def before_exit(self) -> None:
        """On a graceful stop: cached prefixes go down to a tier that outlives the process (the file tier)."""
        if self.kv_memory.kv_tiers is not None:
            self.kv_memory.kv_tiers.write_down_before_exit()

    def close(self) -> None:
        self.grammars.close()
        if self.kv_memory.kv_tiers is not None:  # pages still being written down are finished first
            self.kv_memory.kv_tiers.close()
        self.io.close()
