"""The scheduler assembled from outside: every part made from the config and the plugins, then handed over.

:func:`build_scheduler` is the one place that chooses what a rank runs with:
the scheduling policy (a plugin, contained), the grammar compiler (the grammar
backend plugin), the model step (with speculative decoding when a proposer is
configured), the embedding step, the LoRA adapters, the control target and the
rank's edges. The :class:`Scheduler` gets them as :class:`SchedulerParts` and
builds nothing itself. The order below is the order a rank starts in: a draft
model that does not load, or a start-up adapter that cannot be served, stops
it before any socket is opened.
"""

from __future__ import annotations

import functools
import logging

from tercet.config_sections import CacheConfig
from tercet.containment import ContainedFailures
from tercet.ipc.result_routes import ResultRoutes
from tercet.metrics.stage_timer import stage_timer
from tercet.model.cpu_threads import cpu_threads_of
from tercet.processes.context import ProcessContext
from tercet.processes.manager_io import ManagerIO
from tercet.processes.watchdog import StepHeartbeat
from tercet.scheduler.admission import Admission
from tercet.scheduler.contained_policy import ContainedPolicy
from tercet.scheduler.control import ControlTarget
from tercet.scheduler.rank_profiler import RankProfiler
from tercet.scheduler.embeddings import EmbeddingStep
from tercet.scheduler.eviction_reporter import eviction_reporter_of
from tercet.scheduler.grammar.compiler import GrammarCompiler, grammar_tokenizer, num_cores
from tercet.scheduler.kv_memory import RequestKVMemory
from tercet.scheduler.kv_tiers.tiered_cache import kv_tiers_of
from tercet.scheduler.lora_adapters import scheduler_adapters_of
from tercet.scheduler.metrics_reporter import RankMetricsReporter, report_of
from tercet.scheduler.model_step import ModelStep
from tercet.scheduler.prefill_budget import PrefillBudget
from tercet.scheduler.parts import SchedulerEdges, SchedulerParts
from tercet.scheduler.radix_cache import RadixCache
from tercet.scheduler.request_queues import RequestQueues
from tercet.scheduler.scheduler import Scheduler
from tercet.scheduler.speculative.speculation import speculation_of
from tercet.scheduler.stop_conditions import StopConditions
from tercet.scheduler.tensor_parallel_agreement import agreed_outcomes
from tercet.scheduler.tensor_parallel_inbox import SilentSender, TensorParallelInbox

EDGE_FROM_TOKENIZER = "edge 1 (TokenizerManager -> scheduler)"
# The parts log (failures, stage timings) under the scheduler's name.
logger = logging.getLogger(Scheduler.__module__)


def build_scheduler(context: ProcessContext, port_args, model_runner, tokenizer, *, rank: int = 0,
                    heartbeat: StepHeartbeat | None = None) -> Scheduler:
    """A Scheduler for data-parallel rank ``rank``, serving ``model_runner`` with ``tokenizer`` (it decodes
    output tails for stop strings, and gives the grammar backend the vocabulary) on the endpoints of
    ``port_args``, with the parts ``context``'s config and plugins choose."""
    config = context.config
    timer = stage_timer(f"scheduler-{rank}", config.server.profile_interval, logger)
    # On the CPU, the threads the model computes with follow the cores other processes leave free.
    cpu_threads = cpu_threads_of(config.model.cpu_threads, model_runner.device)
    failures = ContainedFailures(f"scheduler (rank {rank})", logger)
    kv_memory = RequestKVMemory(model_runner, prefix_cache_of(model_runner, config.cache))
    kv_memory.kv_tiers = kv_tiers_of(context, model_runner, kv_memory.prefix_cache, failures)
    queues = RequestQueues(kv_memory)
    prefill_budget = PrefillBudget(config.scheduler.chunked_prefill_size, config.scheduler.max_decode_slowdown)
    admission = Admission(queues, kv_memory, contained_policy(context, failures), config.scheduler, prefill_budget)
    grammars = grammar_compiler(context, tokenizer, model_runner)
    model_step = ModelStep(
        queues, kv_memory, model_runner, timer,
        stop_conditions=StopConditions(model_runner.eos_token_ids, tokenizer), failures=failures,
        grammar_plugin=grammars.plugin_name, prefill_budget=prefill_budget,
        speculation=speculation_of(context, model_runner, failures),
    )
    embedding_step = EmbeddingStep(
        model_runner, kv_memory, queues, timer, token_budget=config.scheduler.chunked_prefill_size,
        max_batch_size=config.scheduler.max_running_requests,
    )
    adapters = scheduler_adapters_of(context, model_runner, functools.partial(adapters_in_use, queues, grammars))
    if adapters is not None and kv_memory.prefix_cache is not None:
        adapters.on_unload = kv_memory.prefix_cache.drop_namespace
    control_target = ControlTarget(
        rank, queues, kv_memory, grammars, model_runner, failures, model_step.speculation, adapters,
        profiler=rank_profiler_of(config, rank, model_runner),
    )
    edges = open_edges(ManagerIO(context, "scheduler", EDGE_FROM_TOKENIZER), port_args, rank, model_runner.tp,
                       failures)
    metrics_reporter = RankMetricsReporter(
        lambda: report_of(control_target.stats(), kv_memory.prefix_cache is not None),
        edges.sender_to_tokenizer.send_to_all, failures,
    )
    return Scheduler(SchedulerParts(
        config=config, rank=rank, model_runner=model_runner, failures=failures, timer=timer,
        heartbeat=heartbeat or StepHeartbeat(), cpu_threads=cpu_threads, kv_memory=kv_memory, queues=queues,
        admission=admission, grammars=grammars, model_step=model_step, embedding_step=embedding_step,
        adapters=adapters, control_target=control_target, metrics_reporter=metrics_reporter, edges=edges,
        eviction_reporter=eviction_reporter_of(config, rank, kv_memory.prefix_cache,
                                               edges.sender_to_tokenizer.send_to_all, failures),
    ))


def rank_profiler_of(config, rank: int, model_runner) -> RankProfiler:
    """The rank's torch profiler; each process of a tensor-parallel group writes its own trace."""
    tp = getattr(model_runner, "tp", None)
    tp_size, tp_rank = getattr(tp, "size", 1), getattr(tp, "rank", 0)
    name = f"dp{rank}" if tp_size <= 1 else f"dp{rank}-tp{tp_rank}"
    return RankProfiler(config.server.profile_root, name, on_cuda=getattr(getattr(model_runner, "device", None), "type", "cpu") == "cuda")


def prefix_cache_of(model_runner, cache: CacheConfig) -> RadixCache | None:
    """The radix prefix cache, where ``[cache] prefix_cache`` asks for one and the model has a KV pool
    (an encoder has none to share prefixes of: tercet.model.encoder_runner)."""
    if not (cache.prefix_cache and model_runner.can_generate):
        return None
    return RadixCache(model_runner.page_allocator, model_runner.page_size)


def contained_policy(context: ProcessContext, failures: ContainedFailures) -> ContainedPolicy:
    """The policy ``[scheduler] policy`` chooses, bypassed for a step when it fails."""
    return ContainedPolicy(
        context.chosen("scheduling_policies")(context.config),
        plugin_name=context.chosen_plugin_name("scheduling_policies"),
        failures=failures,
    )


def grammar_compiler(context: ProcessContext, tokenizer, model_runner) -> GrammarCompiler:
    """Compiles output constraints with the backend ``[grammar] backend`` chooses."""
    backend = context.chosen("grammar_backends")
    config = context.config.grammar
    return GrammarCompiler(
        lambda: backend(grammar_tokenizer(tokenizer, model_runner)),
        config.cache_size,
        plugin_name=context.chosen_plugin_name("grammar_backends"),
        num_workers=config.compile_workers or num_cores(),
        compile_timeout=config.compile_timeout,
        allow_extra_properties=config.allow_extra_properties,
        # Tensor-parallel ranks must admit a constrained request at the same step.
        agree=functools.partial(agreed_outcomes, model_runner.tp),
    )


def adapters_in_use(queues: RequestQueues, grammars: GrammarCompiler) -> set[str | None]:
    """The LoRA adapters of every request the rank holds: waiting, running or compiling its grammar."""
    held = [*queues.running, *(req for leader in queues.waiting for req in leader.group),
            *(req for entry in grammars.pending for req in entry.group)]
    return {req.lora_name for req in held}


def open_edges(io: ManagerIO, port_args, rank: int, tp, failures: ContainedFailures) -> SchedulerEdges:
    """The rank's three edges: its input, and its senders to the detokenizer and the TokenizerManager."""
    if tp.rank == 0:
        receiver = io.open_receiver(port_args.scheduler_inputs[rank], failures)
        sender_to_detokenizer = io.open_sender(port_args.detokenizer_input)
        # Control replies go straight back to the API worker that asked; figures to every worker.
        sender_to_tokenizer = ResultRoutes(io.open_sender, port_args.tokenizer_inputs)
    else:
        # A tensor-parallel peer: rank 0 receives and answers for the group.
        io.failures = failures
        receiver = None
        sender_to_detokenizer = SilentSender()
        sender_to_tokenizer = ResultRoutes(lambda endpoint: SilentSender(), port_args.tokenizer_inputs[:1])
    inbox = TensorParallelInbox(tp, receiver) if tp.enabled else None
    return SchedulerEdges(io, receiver, sender_to_detokenizer, sender_to_tokenizer, inbox)
