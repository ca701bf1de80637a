"""The threads that compile grammars: a pool whose abandoned work never holds a place.

A compile runs native code (llguidance releases the GIL while it builds a
grammar, so the scheduler's loop keeps stepping). Native code cannot be
interrupted from Python, and llguidance offers no way to cancel the build of
a grammar, so a compile nobody waits for any more (its request timed out or
went away) is *written off*: it runs to its end in its thread, but stops
counting against the pool, so the compiles behind it start at the next
:meth:`CompilePool.start_queued` (the scheduler calls it once a step, so a
burst of aborts does not start, one by one, compiles the next abort writes
off). Written-off compiles still use a core each, so they are capped too: at
most ``WRITTEN_OFF_PER_WORKER * num_workers`` of them run besides the
``num_workers`` that count, and past that the queue waits for one to end. (A process per compile could be
killed, but what it compiles cannot be handed back: the compiled grammar is a
native object of the process that built it.)
"""

from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import Future
from typing import Callable

# Aborts come one at a time, and each lets a queued compile start that the next
# may write off: three clients dropping their slow requests at once already left
# four written off on two workers. Past the cap only constrained requests wait
# (and end at their compile_timeout); below it, the CPU is shared with the model.
WRITTEN_OFF_PER_WORKER = 4
# Added to a compile thread's niceness (Linux keeps one per thread): the scheduler's loop and
# the model's threads come first, and compiles take the CPU they leave. Measured at
# tp=2 beside four written-off compiles, a small request took 1.3 s at the same
# priority.
NICENESS_ADDED = 10


class CompilePool:
    def __init__(self, num_workers: int, name: str = "grammar-compile"):
        if num_workers < 1:
            raise ValueError("a compile pool needs at least one worker")
        self.num_workers = num_workers
        self.name = name
        self._lock = threading.Lock()
        self._queued: collections.deque[tuple[Future, Callable[[], object]]] = collections.deque()
        self._counted: set[Future] = set()
        self._written_off: set[Future] = set()
        self._is_closed = False

    def submit(self, work: Callable[[], object]) -> Future:
        """``work()`` on a pool thread, as soon as a place is free; its future."""
        future: Future = Future()
        with self._lock:
            self._queued.append((future, work))
            self._start_what_fits()
        return future

    def write_off(self, future: Future) -> None:
        """Nobody waits for ``future`` any more: one not started never starts, one
        running runs on without holding a place (taken by the next :meth:`start_queued`)."""
        with self._lock:
            for queued in self._queued:
                if queued[0] is future:
                    self._queued.remove(queued)
                    future.cancel()
                    return
            if future in self._counted:
                self._counted.discard(future)
                self._written_off.add(future)

    def start_queued(self) -> None:
        """Start what waits, as far as places allow."""
        with self._lock:
            self._start_what_fits()

    @property
    def num_running(self) -> int:
        """Compiles running that count against the pool."""
        return len(self._counted)

    @property
    def num_written_off(self) -> int:
        """Compiles still running that nobody waits for."""
        return len(self._written_off)

    def close(self) -> None:
        """Start nothing more; what runs ends on its own (the threads are daemons)."""
        with self._lock:
            self._is_closed = True
            while self._queued:
                self._queued.popleft()[0].cancel()

    def _start_what_fits(self) -> None:
        # Called with the lock held.
        while (self._queued and not self._is_closed and len(self._counted) < self.num_workers
               and len(self._written_off) < WRITTEN_OFF_PER_WORKER * self.num_workers):
            future, work = self._queued.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self._counted.add(future)
            threading.Thread(target=self._run, args=(future, work), name=self.name, daemon=True).start()

    def _run(self, future: Future, work: Callable[[], object]) -> None:
        _lower_this_threads_priority()
        result = error = None
        try:
            result = work()
        except BaseException as raised:  # handed to whoever waits, as an executor does
            error = raised
        # The place is free before anyone hears the compile ended.
        with self._lock:
            self._counted.discard(future)
            self._written_off.discard(future)
            self._start_what_fits()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def _lower_this_threads_priority() -> None:
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + NICENESS_ADDED))
    except (AttributeError, OSError):  # not Linux, or not allowed: compile at the loop's priority
        pass
