"""Progress while a benchmark runs, on stderr (stdout stays free for the report).

On a terminal it is a live bar, redrawn in place a few times a second and at
every finished request, and left on its own line at the end. Anywhere else
(a pipe, a file, CI's log) it is a plain ``done/total`` line every few
seconds, so a log gets no carriage returns and no flood of lines; runs
shorter than one interval print nothing there.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TextIO

PROGRESS_INTERVAL_S = 5.0
BAR_INTERVAL_S = 0.25
BAR_WIDTH = 30


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, interval: float | None = None,
                 live: bool | None = None):
        """``live``: draw the bar (default: when ``stream`` is a terminal)."""
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.live = is_terminal(self.stream) if live is None else live
        self.interval = interval if interval is not None else (BAR_INTERVAL_S if self.live else PROGRESS_INTERVAL_S)
        self.num_done = 0
        self.num_failed = 0
        self.started = time.perf_counter()
        self.has_drawn = False

    def note(self, is_success: bool) -> None:
        self.num_done += 1
        if not is_success:
            self.num_failed += 1
        if self.live:
            self.draw()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        return f"tercet bench: {self.num_done}/{self.total} requests done, {self.num_failed} failed, {elapsed:.0f} s"

    def bar(self) -> str:
        elapsed = time.perf_counter() - self.started
        filled = BAR_WIDTH * self.num_done // self.total if self.total else BAR_WIDTH
        rate = self.num_done / elapsed if elapsed > 0 else 0.0
        failed = f", {self.num_failed} failed" if self.num_failed else ""
        return (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.num_done}/{self.total} requests"
                f"{failed}, {elapsed:.0f} s, {rate:.1f} req/s")

    def draw(self) -> None:
        # "\r" and clear-to-end-of-line: the bar replaces itself.
        self.stream.write("\r" + self.bar() + "\x1b[K")
        self.stream.flush()
        self.has_drawn = True

    async def print_periodically(self) -> None:
        """Draw the bar, or print a line, every interval until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            if self.live:
                self.draw()
            else:
                print(self.line(), file=self.stream, flush=True)

    def finish(self) -> None:
        """End the bar's line, so what is printed next starts on a line of its own."""
        if self.live and self.has_drawn:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
