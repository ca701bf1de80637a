"""How many CPU threads a model on the CPU computes with: the cores that other work leaves free.

torch's OpenMP threads meet after every op. When another process keeps one of
their cores busy, the thread on that core gets a slice of it, and every op
waits for that thread while the others spin: on this 2-core machine, with one
busy process beside the server, two threads served 131 output tokens/s at
c=32 where one thread served 277 (and 438 with the machine to itself). So
with ``[model] cpu_threads = 0`` (the default) the scheduler looks, about once
a second between steps, at how busy the cores it may run on are, less its own
use, and computes with the cores left (at least one). A positive value is
used as it is.

The figures come from ``/proc/stat`` (the process's own CPUs only) and
``os.times``; where they cannot be read the thread count stays as torch set it.

A thread count that changes must not change results: MKL's float32 matmuls
split their sums by it (on a Xeon with AVX-512, ``F.linear`` of 8 rows of 384
into 1152 gave other bits on 1 thread than on 2, and so did an embedding of
all-MiniLM-L6-v2). :func:`same_results_at_any_thread_count` asks MKL for its
strict reproducible mode before the first matmul; it cost nothing measurable
on the matmul shapes of the default and embedding models (8 to 1024 rows).

Between parallel regions (the host work of a step, one layer's op and the
next) GNU OpenMP's worker threads spin for a while, then sleep; a sleeping
worker costs a wake-up at the next region, and on a machine whose other cores
run the API, detokenizer and client processes it also hands its core to them
for a while. :func:`workers_wait_awake_through_a_step` makes the spin long
enough (``GOMP_SPINCOUNT`` 30 million, about 0.4 s here) that the workers stay
awake through a serving step: served at c=32 on the 2-core Xeon, 541-575 tok/s
against 505-522 with the runtime's default (six pairs of runs, docs/benchmarks.md),
c=1 and a run beside a busy process (one thread, no workers) unchanged. An idle scheduler's
worker spins that long after its last step, then sleeps.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
# MKL's conditional numerical reproducibility, strict: the same bits at any thread count.
MKL_REPRODUCIBLE = ("MKL_CBWR", "AUTO,STRICT")


# GNU OpenMP's spins before a waiting worker sleeps (its default is 300 thousand).
WORKERS_SPIN = ("GOMP_SPINCOUNT", "30000000")


def workers_wait_awake_through_a_step() -> None:
    """Before this process loads OpenMP (before torch is imported): its worker threads spin through a
    step's gaps instead of sleeping. A user's ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is kept."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault(*WORKERS_SPIN)


def same_results_at_any_thread_count() -> None:
    """Before this process's first matmul: MKL's results independent of the thread count (an
    ``MKL_CBWR`` set by the user is kept)."""
    os.environ.setdefault(*MKL_REPRODUCIBLE)


@dataclass(frozen=True)
class CpuUsage:
    """Cumulative seconds: the busy time of this process's CPUs (all processes), and this process's own."""

    cores_busy_s: float
    own_s: float
    at_s: float


def read_cpu_usage(cpus: frozenset[int]) -> CpuUsage | None:
    """The usage now, or None where ``/proc/stat`` cannot be read."""
    try:
        with open("/proc/stat") as stat:
            lines = stat.read().splitlines()
    except OSError:
        return None
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    busy_ticks = 0
    for line in lines:
        name, _, values = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
        fields = [int(value) for value in values.split()]
        busy_ticks += sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    own = os.times()
    return CpuUsage(busy_ticks / ticks_per_s, own.user + own.system, time.monotonic())


def threads_for(cores: int, others_busy_cores: float) -> int:
    """The threads that fit the cores others leave free: at least one, at most ``cores``."""
    return max(1, min(cores, round(cores - others_busy_cores)))


class CpuThreads:
    """Keeps torch's thread count at the cores left free, checked at most once per interval."""

    def __init__(self, configured: int, set_threads: Callable[[int], None], current: int,
                 cpus: frozenset[int] | None = None, read_usage: Callable[[frozenset[int]], CpuUsage | None] =
                 read_cpu_usage, interval_s: float = CHECK_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.cpus = frozenset(os.sched_getaffinity(0)) if cpus is None else cpus
        self.set_threads = set_threads
        self.read_usage = read_usage
        self.interval_s = interval_s
        self.clock = clock
        self.adapts = configured == 0
        self.threads = current
        if not self.adapts and configured != current:
            self._use(configured, "model.cpu_threads")
        self.last = read_usage(self.cpus) if self.adapts else None

    def check(self) -> None:
        """Between steps: once an interval has passed, follow the cores other processes keep busy."""
        if self.last is None or self.clock() - self.last.at_s < self.interval_s:
            return
        now = self.read_usage(self.cpus)
        if now is None:
            return
        elapsed = now.at_s - self.last.at_s
        others = ((now.cores_busy_s - self.last.cores_busy_s) - (now.own_s - self.last.own_s)) / elapsed
        self.last = now
        wanted = threads_for(len(self.cpus), others)
        if wanted != self.threads:
            self._use(wanted, f"other processes keep {max(others, 0.0):.1f} of {len(self.cpus)} cores busy")

    def _use(self, threads: int, why: str) -> None:
        logger.info("computing with %d CPU thread(s), not %d: %s", threads, self.threads, why)
        self.set_threads(threads)
        self.threads = threads


def cpu_threads_of(configured: int, device) -> CpuThreads | None:
    """The thread keeper of a model on ``device`` (a ``torch.device``); None off the CPU."""
    if device.type != "cpu":
        return None
    import torch

    return CpuThreads(configured, torch.set_num_threads, torch.get_num_threads())
