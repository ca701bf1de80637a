"""What a Scheduler runs with: its collaborators, each made outside it.

:func:`tercet.scheduler.assembly.build_scheduler` makes every part from the
config and the plugins (the policy inside :class:`Admission`, the grammar
compiler, the model step with its speculation, the embedding step, the
control target, the rank's edges) and hands them over in one
:class:`SchedulerParts`; the :class:`tercet.scheduler.scheduler.Scheduler`
only drives them: its loop and its message handlers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tercet.config_sections import TercetConfig
    from tercet.containment import ContainedFailures
    from tercet.ipc.channels import MessageReceiver, MessageSender
    from tercet.ipc.result_routes import ResultRoutes
    from tercet.metrics.stage_timer import NoStageTimer, StageTimer
    from tercet.model.cpu_threads import CpuThreads
    from tercet.processes.manager_io import ManagerIO
    from tercet.processes.watchdog import StepHeartbeat
    from tercet.scheduler.admission import Admission
    from tercet.scheduler.control import ControlTarget
    from tercet.scheduler.embeddings import EmbeddingStep
    from tercet.scheduler.eviction_reporter import EvictionReporter
    from tercet.scheduler.grammar.compiler import GrammarCompiler
    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.lora_adapters import SchedulerAdapters
    from tercet.scheduler.metrics_reporter import RankMetricsReporter
    from tercet.scheduler.model_step import ModelStep
    from tercet.scheduler.request_queues import RequestQueues
    from tercet.scheduler.tensor_parallel_inbox import SilentSender, TensorParallelInbox


@dataclass(frozen=True)
class SchedulerEdges:
    """The rank's three edges: its input, and its senders to the detokenizer and the TokenizerManager."""

    # Opens the sockets and dispatches what arrives; the Scheduler gives it its handlers.
    io: ManagerIO
    # Edge 1, bound by tensor-parallel rank 0 (None on its peers, which rank 0 receives and answers for).
    receiver: MessageReceiver | None
    # Edge 2 (a sender that drops everything on a tensor-parallel peer).
    sender_to_detokenizer: MessageSender | SilentSender
    # Edge 3: control replies to the API worker that asked, figures to every worker.
    sender_to_tokenizer: ResultRoutes
    # Under tensor parallelism: what every rank of the group receives, in one order (None otherwise).
    inbox: TensorParallelInbox | None


@dataclass(frozen=True)
class SchedulerParts:
    """Everything a Scheduler is given; see :func:`tercet.scheduler.assembly.build_scheduler`."""

    config: TercetConfig
    rank: int
    # A ModelRunner (decoder) or an EncoderRunner (embeddings only).
    model_runner: object
    # The rank's contained failures, counted by kind and plugin.
    failures: ContainedFailures
    timer: StageTimer | NoStageTimer
    # Shared with the supervisor, whose watchdog kills a scheduler stuck in a step.
    heartbeat: StepHeartbeat
    # On the CPU, the threads the model computes with, following the cores other processes leave free.
    cpu_threads: CpuThreads | None
    kv_memory: RequestKVMemory
    # The one owner of which request is where, and of the counters about them.
    queues: RequestQueues
    # Admission, with the policy ``[scheduler] policy`` chooses.
    admission: Admission
    # Output constraints, compiled off the loop by the backend ``[grammar] backend`` chooses.
    grammars: GrammarCompiler
    # One forward for the batch, with its stop conditions and speculation (``[speculative]``).
    model_step: ModelStep
    embedding_step: EmbeddingStep
    # The LoRA adapters; None when ``[lora]`` is off.
    adapters: SchedulerAdapters | None
    # What control requests act on.
    control_target: ControlTarget
    # The rank's figures for /metrics, sent between steps without being asked.
    metrics_reporter: RankMetricsReporter
    edges: SchedulerEdges
    # What the prefix cache evicted, told to the API workers between steps (None: one rank, or no cache).
    eviction_reporter: EvictionReporter | None = None
