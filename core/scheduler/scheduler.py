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

import itertools
import logging
import secrets

import zmq

from tercet.channels import MessageReceiver, MessageSender
from tercet.containment import INTERNAL_FAILURE_STATUS, ContainedFailures, internal_failure_message
from tercet.context_length import context_length_problem
from tercet.control_messages import ControlRequest
from tercet.dispatcher import TypeBasedDispatcher
from tercet.errors import RequestError
from tercet.messages import AbortReq, FinishReason, TokenizedGenerateReq, choice_rid
from tercet.plugin_manager import message_handlers
from tercet.process_context import ProcessContext
from tercet.sampling_params import MAX_N, SamplingParams
from tercet.scheduler.admission import Admission
from tercet.scheduler.contained_policy import ContainedPolicy
from tercet.scheduler.grammars import GrammarCompiler, grammar_tokenizer
from tercet.scheduler.control import answer, builtin_control_handlers
from tercet.scheduler.intake import check_generate_request
from tercet.scheduler.kv_memory import RequestKVMemory
from tercet.scheduler.model_step import ModelStep
from tercet.scheduler.output import send_outputs_contained
from tercet.scheduler.radix_cache import RadixCache
from tercet.scheduler.req import Req
from tercet.scheduler.stats import SchedulerStats
from tercet.scheduler.stop_conditions import StopConditions
from tercet.stage_timer import stage_timer
from tercet.watchdog import StepHeartbeat

logger = logging.getLogger(__name__)
EDGE_FROM_TOKENIZER = "edge 1 (TokenizerManager -> scheduler)"
# How often an otherwise idle loop looks for a finished grammar compile.
GRAMMAR_POLL_MS = 2


def completion_seed(seed: int, index: int) -> int:
    """Distinct, reproducible seeds for the n completions of one request."""
    return seed if index == 0 else (seed * 1_000_003 + index) % (1 << 63)


class Scheduler:
    def __init__(self, context: ProcessContext, port_args, model_runner, tokenizer, rank: int = 0,
                 heartbeat: StepHeartbeat | None = None):
        config = context.config
        # Shared with the supervisor, whose watchdog kills a scheduler stuck in a step.
        self.heartbeat = heartbeat or StepHeartbeat()
        self.timer = stage_timer(f"scheduler-{rank}", config.server.profile_interval, logger)
        self.config = config
        self.rank = rank
        self.model_runner = model_runner
        prefix_cache = RadixCache(model_runner.page_allocator, model_runner.page_size) if config.cache.prefix_cache else None
        self.kv_memory = RequestKVMemory(model_runner, prefix_cache)
        self.stop_conditions = StopConditions(model_runner.eos_token_ids, tokenizer)
        self.failures = ContainedFailures(f"scheduler (rank {rank})", logger)
        policies = context.registries.scheduling_policies
        self.policy = ContainedPolicy(
            policies.get(config.scheduler.policy)(config),
            plugin_name=policies.entries[config.scheduler.policy].plugin_name,
            failures=self.failures,
        )
        self.admission = Admission(self, config.scheduler)
        self.model_step = ModelStep(self, config.scheduler.chunked_prefill_size)
        grammar_backends = context.registries.grammar_backends
        self.grammars = GrammarCompiler(
            lambda: grammar_backends.get(config.grammar.backend)(grammar_tokenizer(tokenizer, model_runner)),
            config.grammar.cache_size,
            plugin_name=grammar_backends.entries[config.grammar.backend].plugin_name,
        )

        serializer = context.create_serializer()
        self.zmq_context = zmq.Context()
        self.receiver = MessageReceiver(
            self.zmq_context, port_args.scheduler_inputs[rank], serializer, bind=True,
            edge=EDGE_FROM_TOKENIZER, failures=self.failures,
        )
        self.sender_to_detokenizer = MessageSender(self.zmq_context, port_args.detokenizer_input, serializer)
        # Control replies go straight back to the TokenizerManager.
        self.sender_to_tokenizer = MessageSender(self.zmq_context, port_args.tokenizer_input, serializer)
        handlers = [
            *builtin_control_handlers(self),
            # Plugins' handlers see a snapshot of the rank's figures, never the scheduler itself.
            *[
                (message_type, lambda message, handler=handler: handler(SchedulerStats.of(self), message))
                for message_type, handler in message_handlers(context.plugin_manager, "scheduler")
            ],
        ]
        self.dispatcher = TypeBasedDispatcher(
            [
                (TokenizedGenerateReq, self.handle_generate_request),
                (AbortReq, self.handle_abort_request),
                *[(message_type, self.replying(handler)) if issubclass(message_type, ControlRequest)
                  else (message_type, handler) for message_type, handler in handlers],
            ]
        )
        # Waiting requests are group leaders; their followers wait inside them.
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.arrival_counter = itertools.count()
        # Finished or refused requests whose last output has not been sent yet.
        self.finished_unsent: list[Req] = []
        self.num_retractions = 0
        self.num_prompt_tokens_admitted = 0
        self.num_prompt_tokens_from_cache = 0
        self.is_paused = False
        self.waiting_is_stuck = False

    @property
    def prefix_cache(self) -> RadixCache | None:
        return self.kv_memory.prefix_cache

    # -- the loop ---------------------------------------------------------

    def run_forever(self) -> None:
        while True:
            idle = self.is_idle
            if idle:
                self.heartbeat.rest()
            self.receive_and_dispatch(block=idle)
            self.heartbeat.beat()
            self.run_step()
            self.timer.end_step()

    def receive_and_dispatch(self, block: bool) -> None:
        if block:
            # A grammar compiling in its thread: look again soon rather than wait for a message.
            self.receiver.poll(timeout_ms=GRAMMAR_POLL_MS if self.grammars.pending else None)
        with self.timer.stage("receive"):
            for message in self.receiver.receive_pending():
                self.dispatch(message)

    def dispatch(self, message) -> None:
        self.dispatcher.dispatch_contained(message, EDGE_FROM_TOKENIZER, self.failures)

    @property
    def is_idle(self) -> bool:
        """Nothing can change until a message arrives: sleep until one does."""
        return self.is_paused or not self.running and (not self.waiting or self.waiting_is_stuck)

    def run_step(self) -> None:
        if self.grammars.pending:
            self.admit_compiled_grammars()
        if not self.is_paused:
            with self.timer.stage("schedule"):
                admitted = self.admission.admit_waiting_requests()
            # Nothing runs and nothing could be admitted: only a message (an abort,
            # a new request, a control request) can change that.
            self.waiting_is_stuck = not admitted and not self.running
            if self.running:
                self.model_step.run()
        self.send_outputs()

    def replying(self, handler):
        """Wrap a control handler: its result (or failure) goes back as a ControlReply."""
        return lambda message: self.sender_to_tokenizer.send(answer(self, message, handler))

    # -- message handlers -------------------------------------------------

    def handle_generate_request(self, message: TokenizedGenerateReq) -> None:
        try:
            check_generate_request(message, self.model_runner.vocab_size)
            group = self.request_group(message)
        except RequestError as error:
            self.refuse(message, FinishReason("abort", message=error.message, status_code=error.status_code))
            return
        except Exception:
            self.failures.record("generate_request", f"setting up request {message.rid!r} failed")
            self.refuse(message, self.internal_failure("setting up the request"))
            return
        reason = self.why_it_can_never_run(group)
        if reason is not None:
            for req in group:
                self.finish(req, reason)
            return
        if message.sampling_params.constraint is not None:
            self.grammars.submit(group)  # joins the waiting queue once compiled
            return
        self.waiting.append(group[0])

    def admit_compiled_grammars(self) -> None:
        for group, error in self.grammars.take_ready():
            if error is None:
                self.waiting.append(group[0])
                continue
            status, message = error
            kind = group[0].sampling_params.constraint[0]
            reason = FinishReason("abort", message=f"{kind}: {message}", status_code=status, param=kind)
            for req in group:
                self.finish(req, reason)

    def request_group(self, message: TokenizedGenerateReq) -> list[Req]:
        """The n completions of one prompt: a leader, and followers waiting inside it."""
        params = message.sampling_params
        # The TokenizerManager always fixes a seed; another sender may not.
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        arrival_index = next(self.arrival_counter)
        group = [
            Req(choice_rid(message.rid, index, params.n), list(message.input_ids), params, arrival_index,
                priority=message.priority, tenant=message.tenant, seed=completion_seed(seed, index))
            for index in range(params.n)
        ]
        group[0].followers = group[1:]
        logger.debug(
            "request %s: %d prompt tokens, n=%d, priority %d, tenant %s",
            message.rid, len(message.input_ids), params.n, message.priority, message.tenant,
        )
        return group

    def why_it_can_never_run(self, group: list[Req]) -> FinishReason | None:
        if len(group) > self.admission.max_running_requests:
            return FinishReason(
                "abort", status_code=400,
                message=f"n={len(group)} completions cannot run together: "
                f"scheduler.max_running_requests is {self.admission.max_running_requests}",
            )
        needed_pages = sum(self.kv_memory.pages_for(req.max_num_tokens) for req in group)
        if needed_pages > self.kv_memory.page_allocator.num_total:
            return FinishReason(
                "abort",
                message=f"the request needs {sum(req.max_num_tokens for req in group)} KV cache tokens "
                f"(prompt + max_tokens, for each of n) but the whole cache holds "
                f"{self.kv_memory.capacity_tokens} (cache.max_total_tokens)",
                status_code=400,
            )
        leader = group[0]
        problem = context_length_problem(
            len(leader.input_ids), leader.sampling_params.max_new_tokens, self.model_runner.context_len
        )
        return None if problem is None else FinishReason("abort", message=problem, status_code=400)

    def refuse(self, message: TokenizedGenerateReq, reason: FinishReason) -> None:
        """End a request the scheduler holds nothing for yet: every completion id
        its sender waits on gets ``reason``."""
        n = getattr(message.sampling_params, "n", 1)
        n = n if isinstance(n, int) and 1 <= n <= MAX_N else 1
        for index in range(n):
            req = Req(choice_rid(message.rid, index, n), list(message.input_ids), SamplingParams(), -1)
            self.finish(req, reason)

    @staticmethod
    def internal_failure(what: str) -> FinishReason:
        return FinishReason("abort", message=internal_failure_message(what), status_code=INTERNAL_FAILURE_STATUS)

    def fail(self, req: Req, what: str) -> None:
        """End one running request whose own part of the step failed (already recorded)."""
        if req in self.running:
            self.running.remove(req)
        for leader in self.running:
            if req in leader.followers:
                leader.followers.remove(req)
        for member in req.followers:  # completions still waiting on its prompt end with it
            self.finish(member, self.internal_failure(what))
        req.followers = []
        self.finish(req, self.internal_failure(what))

    def handle_abort_request(self, message: AbortReq) -> None:
        for group in self.grammars.drop({message.rid}):
            for req in group:  # the rest of the group ends too: it was never started
                self.finish(req, FinishReason("abort", message="aborted"))
        for req in self.running:
            if req.rid == message.rid:
                for leader in self.running:
                    if req in leader.followers:  # still waiting for its leader's prompt
                        leader.followers.remove(req)
                self.running.remove(req)
                self.finish(req, FinishReason("abort", message="aborted"))
                return
        for leader in self.waiting:
            for req in leader.group:
                if req.rid == message.rid:
                    self.remove_from_waiting(leader, req)
                    self.finish(req, FinishReason("abort", message="aborted"))
                    return

    def remove_from_waiting(self, leader: Req, req: Req) -> None:
        if req is not leader:
            leader.followers.remove(req)
            return
        position = self.waiting.index(leader)
        if leader.followers:
            # The next completion leads the rest of the group.
            successor, successor.followers = leader.followers[0], leader.followers[1:]
            self.waiting[position] = successor
        else:
            del self.waiting[position]
        leader.followers = []

    # -- request life -----------------------------------------------------

    def retract(self, req: Req) -> None:
        """Send a running request (and any followers waiting on it) back to the waiting queue."""
        for member in req.group:
            self.kv_memory.release(member)
            self.running.remove(member)
        if req.prompt_logprobs is not None and len(req.prompt_logprobs.token_ids) < len(req.input_ids):
            req.prompt_logprobs = None  # recomputed from the start when it resumes
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.append(req)
        logger.info(
            "retracted request %s (%d tokens) to free KV memory; %d retractions so far",
            req.rid, req.num_tokens, self.num_retractions,
        )

    def finish(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self.kv_memory.release(req)
        self.finished_unsent.append(req)

    # -- output -----------------------------------------------------------

    def send_outputs(self) -> None:
        ready = [req for req in self.running if len(req.output_ids) > req.num_sent_tokens] + self.finished_unsent
        self.finished_unsent = []
        if ready:
            with self.timer.stage("output"):
                send_outputs_contained(self, ready)

    def close(self) -> None:
        self.grammars.close()
        self.receiver.close()
        self.sender_to_detokenizer.close()
        self.sender_to_tokenizer.close()
        self.zmq_context.term()
