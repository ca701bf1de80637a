"""A scheduler's heartbeat, shared with the supervising process.

The scheduler marks when its current busy stretch began (0 while it sleeps
waiting for messages) in a shared-memory double; the supervisor reads it. The
check lives in the parent so that a child stuck anywhere (a forward that never
returns, a deadlock, a stopped process) is still caught, which a thread inside
the child could not promise.
"""

from __future__ import annotations

import multiprocessing
import time

_spawn = multiprocessing.get_context("spawn")
IDLE = 0.0


class StepHeartbeat:
    """When the scheduler last showed progress while it had work, if it has work.

    ``time.monotonic`` is CLOCK_MONOTONIC on Linux, one clock for every process
    on the machine, so parent and child compare the same timeline.
    """

    def __init__(self):
        self._busy_since = _spawn.RawValue("d", IDLE)

    def beat(self) -> None:
        """The scheduler is making progress: a new step (or message batch) starts now."""
        self._busy_since.value = time.monotonic()

    def rest(self) -> None:
        """The scheduler is about to wait for messages: nothing to watch."""
        self._busy_since.value = IDLE

    def stalled_for(self) -> float:
        """Seconds since the current busy stretch began; 0 while resting."""
        since = self._busy_since.value
        return 0.0 if since == IDLE else max(0.0, time.monotonic() - since)
