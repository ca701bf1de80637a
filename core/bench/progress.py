"""A "done/total" line on stderr every few seconds while a benchmark runs.

Runs shorter than one interval print nothing; stdout stays free for the report.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TextIO

PROGRESS_INTERVAL_S = 5.0


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, interval: float = PROGRESS_INTERVAL_S):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.num_done = 0
        self.num_failed = 0
        self.started = time.perf_counter()

    def note(self, is_success: bool) -> None:
        self.num_done += 1
        if not is_success:
            self.num_failed += 1

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        return f"tercet bench: {self.num_done}/{self.total} requests done, {self.num_failed} failed, {elapsed:.0f} s"

    async def print_periodically(self) -> None:
        """Print a line every interval until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            print(self.line(), file=self.stream, flush=True)
