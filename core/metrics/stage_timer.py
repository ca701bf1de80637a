"""Where a process's time goes, stage by stage, logged at an interval.

``[server] profile_interval`` (seconds, 0 = off) turns it on. Each process
times its own stages (the scheduler: receive, schedule, forward, sampling,
output; the detokenizer: receive, detokenize, send; the TokenizerManager:
receive, dispatch) and logs, every interval, the mean milliseconds per step
of each stage and its share. Off, the timer is a stand-in whose ``stage`` does
nothing, so the loops pay nothing for it.

Times are wall-clock on the host: on CUDA a stage that only queues kernels
looks cheap and the wait shows up wherever the result is first read.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict


class StageTimer:
    def __init__(self, component: str, interval: float, logger: logging.Logger):
        self.component = component
        self.interval = interval
        self.logger = logger
        self.seconds: dict[str, float] = defaultdict(float)
        self.num_steps = 0
        self.window_started = time.perf_counter()

    @contextlib.contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def end_step(self) -> None:
        """One step (a loop iteration that did work) is over; log if the interval has passed."""
        self.num_steps += 1
        now = time.perf_counter()
        if now - self.window_started >= self.interval:
            self.logger.info("%s", self.report(now - self.window_started))
            self.seconds = defaultdict(float)
            self.num_steps = 0
            self.window_started = now

    def report(self, window: float) -> str:
        timed = sum(self.seconds.values())
        per_step = ", ".join(
            f"{name} {seconds / self.num_steps * 1000:.3f} ms ({seconds / timed:.0%})"
            for name, seconds in self.seconds.items()
        ) if timed > 0 else "nothing timed"
        return (
            f"{self.component} profile: {self.num_steps} steps in {window:.1f} s "
            f"({timed / window:.0%} busy); per step: {per_step}"
        )


class NoStageTimer:
    """The timer when profiling is off."""

    _nothing = contextlib.nullcontext()

    def stage(self, name: str):
        return self._nothing

    def end_step(self) -> None:
        pass


def stage_timer(component: str, interval: float, logger: logging.Logger) -> StageTimer | NoStageTimer:
    return StageTimer(component, interval, logger) if interval > 0 else NoStageTimer()
