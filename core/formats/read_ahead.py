"""A checkpoint's tensors read on a thread of their own, a few ahead of the loop that places them.

Loading a GGUF is two kinds of work a tensor: reading it (numpy unpacks the
file's blocks, rows are reordered) and placing it (parts are joined, a kernel
repacks them). Both run mostly outside the GIL, so reading the next tensors on
a thread while this one is placed uses the second core of a start that would
otherwise leave it idle.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

Item = TypeVar("Item")
_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(items: Iterator[Item], depth: int = 2) -> Iterator[Item]:
    """``items`` in order, produced by a thread at most ``depth`` ahead of the consumer.

    The producer's exception is raised here, where the item would have come. A consumer that
    stops early (an error, a ``break``) stops the producer, which closes ``items`` itself (a
    generator is closed by the thread that runs it)."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                ready.put(item)
                if stop.is_set():
                    return
            ready.put(_DONE)
        except BaseException as error:  # handed over: the consumer raises it
            ready.put(_Failed(error))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    producer = threading.Thread(target=produce, name="tercet-read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        while producer.is_alive():  # a producer blocked on a full queue wakes when it is drained
            try:
                ready.get(timeout=0.05)
            except queue.Empty:
                pass
        producer.join()
