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

import functools
import logging
import secrets

from tercet.config_sections import CacheConfig
from tercet.containment import ContainedFailures
from tercet.context_length import context_length_problem
from tercet.errors import RequestError
from tercet.ipc.result_routes import ResultRoutes
from tercet.ipc.control_messages import ControlRequest
from tercet.ipc.messages import (
    AbortReq,
    FinishKind,
    FinishReason,
    TokenizedEmbeddingReq,
    TokenizedGenerateReq,
    choice_rid,
)
from tercet.metrics.stage_timer import stage_timer
from tercet.model.cpu_threads import cpu_threads_of
from tercet.processes.context import ProcessContext
from tercet.processes.manager_io import ManagerIO
from tercet.processes.watchdog import StepHeartbeat
from tercet.sampling_params import MAX_N, SamplingParams
from tercet.scheduler.admission import Admission
from tercet.scheduler.contained_policy import ContainedPolicy
from tercet.scheduler.control import ControlTarget, answer, builtin_control_handlers
from tercet.scheduler.embeddings import EmbeddingStep, send_embedding_outputs
from tercet.scheduler.grammars import GrammarCompiler, grammar_tokenizer, num_cores
from tercet.scheduler.intake import check_generate_request
from tercet.scheduler.kv_memory import RequestKVMemory
from tercet.scheduler.lora_adapters import scheduler_adapters_of
from tercet.scheduler.metrics_reporter import RankMetricsReporter, report_of
from tercet.scheduler.model_step import ModelStep
from tercet.scheduler.output import send_outputs_contained
from tercet.scheduler.radix_cache import RadixCache
from tercet.scheduler.req import Req
from tercet.scheduler.request_queues import RequestQueues
from tercet.scheduler.speculation import speculation_of
from tercet.scheduler.stop_conditions import StopConditions
from tercet.scheduler.tensor_parallel_agreement import agreed_outcomes
from tercet.scheduler.tensor_parallel_inbox import SilentSender, TensorParallelInbox

logger = logging.getLogger(__name__)
EDGE_FROM_TOKENIZER = "edge 1 (TokenizerManager -> scheduler)"
# How often an otherwise idle loop looks for a finished grammar compile.
GRAMMAR_POLL_MS = 2


def prefix_cache_of(model_runner, cache: CacheConfig) -> RadixCache | None:
    """The radix prefix cache, where ``[cache] prefix_cache`` asks for one and the model has a KV pool
    (an encoder has none to share prefixes of: tercet.model.encoder_runner)."""
    if not (cache.prefix_cache and model_runner.can_generate):
        return None
    return RadixCache(model_runner.page_allocator, model_runner.page_size)


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
        self.tp = model_runner.tp
        # On the CPU, the threads the model computes with follow the cores other processes leave free.
        self.cpu_threads = cpu_threads_of(config.model.cpu_threads, model_runner.device)
        self.failures = ContainedFailures(f"scheduler (rank {rank})", logger)
        self.kv_memory = RequestKVMemory(model_runner, prefix_cache_of(model_runner, config.cache))
        self.stop_conditions = StopConditions(model_runner.eos_token_ids, tokenizer)
        # The one owner of which request is where, and of the counters about them.
        self.queues = RequestQueues(self.kv_memory)
        self.admission = Admission(self.queues, self.kv_memory, self._contained_policy(context), config.scheduler)
        self.grammars = self._grammar_compiler(context, tokenizer)
        self.model_step = ModelStep(
            self.queues, self.kv_memory, model_runner, self.timer,
            stop_conditions=self.stop_conditions, failures=self.failures,
            grammar_plugin=self.grammars.plugin_name, chunked_prefill_size=config.scheduler.chunked_prefill_size,
            speculation=speculation_of(context, model_runner, self.failures),
        )
        self.embedding_step = EmbeddingStep(
            model_runner, self.kv_memory, self.queues, self.timer, token_budget=config.scheduler.chunked_prefill_size,
            max_batch_size=config.scheduler.max_running_requests,
        )
        self.adapters = scheduler_adapters_of(context, model_runner, self.adapters_in_use)
        if self.adapters is not None and self.prefix_cache is not None:
            self.adapters.on_unload = self.prefix_cache.drop_namespace
        self.control_target = ControlTarget(
            rank, self.queues, self.kv_memory, self.grammars, model_runner, self.failures, self.model_step.speculation,
            self.adapters,
        )
        self.io = ManagerIO(context, "scheduler", EDGE_FROM_TOKENIZER)
        self._open_edges(port_args)
        self.io.set_handlers(self._message_handlers())
        self.waiting_is_stuck = False
        # The rank's figures for /metrics, sent between steps without being asked.
        self.metrics_reporter = RankMetricsReporter(
            lambda: report_of(self.control_target.stats(), self.prefix_cache is not None),
            self.sender_to_tokenizer.send_to_all, self.failures,
        )

    def _contained_policy(self, context: ProcessContext) -> ContainedPolicy:
        """The policy ``[scheduler] policy`` chooses, bypassed for a step when it fails."""
        return ContainedPolicy(
            context.chosen("scheduling_policies")(context.config),
            plugin_name=context.chosen_plugin_name("scheduling_policies"),
            failures=self.failures,
        )

    def _grammar_compiler(self, context: ProcessContext, tokenizer) -> GrammarCompiler:
        """Compiles output constraints with the backend ``[grammar] backend`` chooses."""
        backend = context.chosen("grammar_backends")
        config = context.config.grammar
        return GrammarCompiler(
            lambda: backend(grammar_tokenizer(tokenizer, self.model_runner)),
            config.cache_size,
            plugin_name=context.chosen_plugin_name("grammar_backends"),
            num_workers=config.compile_workers or num_cores(),
            compile_timeout=config.compile_timeout,
            allow_extra_properties=config.allow_extra_properties,
            # Tensor-parallel ranks must admit a constrained request at the same step.
            agree=functools.partial(agreed_outcomes, self.tp),
        )

    def _open_edges(self, port_args) -> None:
        """The rank's three edges: its input, and its senders to the detokenizer and the TokenizerManager."""
        self.inbox = None
        if self.tp.rank == 0:
            self.receiver = self.io.open_receiver(port_args.scheduler_inputs[self.rank], self.failures)
            self.sender_to_detokenizer = self.io.open_sender(port_args.detokenizer_input)
            # Control replies go straight back to the API worker that asked; figures to every worker.
            self.sender_to_tokenizer = ResultRoutes(self.io.open_sender, port_args.tokenizer_inputs)
        else:
            # A tensor-parallel peer: rank 0 receives and answers for the group.
            self.io.failures = self.failures
            self.receiver = None
            self.sender_to_detokenizer = SilentSender()
            self.sender_to_tokenizer = ResultRoutes(lambda endpoint: SilentSender(), port_args.tokenizer_inputs[:1])
        if self.tp.enabled:
            self.inbox = TensorParallelInbox(self.tp, self.receiver)

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

    def adapters_in_use(self) -> set[str | None]:
        """The LoRA adapters of every request the rank holds: waiting, running or compiling its grammar."""
        queues = self.queues
        held = [*queues.running, *(req for leader in queues.waiting for req in leader.group),
                *(req for entry in self.grammars.pending for req in entry.group)]
        return {req.lora_name for req in held}

    @property
    def prefix_cache(self) -> RadixCache | None:
        return self.kv_memory.prefix_cache

    @property
    def policy(self) -> ContainedPolicy:
        return self.admission.policy

    # -- the loop ---------------------------------------------------------

    def run_forever(self) -> None:
        while True:
            idle = self.is_idle
            if idle:
                self.heartbeat.rest()
            self.metrics_reporter.between_steps(resting=idle)
            self.receive_and_dispatch(block=idle)
            self.heartbeat.beat()
            if self.cpu_threads is not None:
                self.cpu_threads.check()
            self.run_step()
            self.timer.end_step()

    def receive_and_dispatch(self, block: bool) -> None:
        if self.inbox is not None:
            poll_ms = GRAMMAR_POLL_MS if self.grammars.pending else None
            with self.timer.stage("receive"):
                for message in self.inbox.take(block, poll_ms):
                    self.dispatch(message)
            return
        if block:
            # A grammar compiling in its thread: look again soon rather than wait for a message.
            self.receiver.poll(timeout_ms=GRAMMAR_POLL_MS if self.grammars.pending else None)
        with self.timer.stage("receive"):
            self.io.dispatch_pending()

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

    def close(self) -> None:
        self.grammars.close()
        self.io.close()
