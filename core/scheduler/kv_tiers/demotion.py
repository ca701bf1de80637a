"""Pages the radix cache evicts, written down to the tier in a background thread.

On the scheduler's thread, at eviction: the pages' keys, and a copy of their
K/V taken out of the pool (one index per layer: the slots are reused as soon
as the pages are freed). In the writer thread: each page's bytes and checksum,
and the tier's ``put``. A page the tier holds already, or one being written, is
not copied again; when the writer is more than ``max_pending_bytes`` behind,
evicted pages are dropped (counted) rather than held in memory.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tercet.scheduler.kv_tiers.page_codec import encode_page


class Demotion:
    def __init__(self, storage, pool_pages, page_keys, stats, max_pending_bytes: int):
        self.storage = storage
        self.pool_pages = pool_pages
        self.page_keys = page_keys
        self.stats = stats
        self.max_pending_bytes = max_pending_bytes
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="kv-demotion")
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._pending_bytes = 0
        # Off while the pool is flushed or the weights change: those pages are not worth keeping.
        self.enabled = True

    def demote(self, namespace: str | None, token_ids: tuple[int, ...], pages: list[int]) -> None:
        """Send ``pages``, the last pages of the chain ``token_ids``, down to the tier."""
        if not self.enabled or not pages:
            return
        keys = self.page_keys.keys(token_ids, namespace)[-len(pages):]
        todo = self._not_yet_below(zip(keys, pages))
        size = len(todo) * self.pool_pages.page_bytes
        if not todo or not self._reserve([key for key, _ in todo], size):
            return
        values = self.pool_pages.copy_out([page for _, page in todo])
        self.writer.submit(self._write, [key for key, _ in todo], values, size)

    def _not_yet_below(self, keyed_pages) -> list[tuple[str, int]]:
        """The (key, page) pairs neither being written nor held by the tier already."""
        with self._lock:
            fresh = [(key, page) for key, page in keyed_pages if key not in self._pending]
        return [(key, page) for key, page in fresh if not self.storage.contains(key)]

    def _reserve(self, keys: list[str], size: int) -> bool:
        """Count ``keys`` as being written, unless the writer is too far behind (then they are dropped)."""
        with self._lock:
            if self._pending_bytes + size > self.max_pending_bytes:
                self.stats.add(pages_dropped=len(keys))
                return False
            self._pending.update(keys)
            self._pending_bytes += size
            return True

    def _write(self, keys: list[str], values, size: int) -> None:
        try:
            for key, page in zip(keys, self.pool_pages.split(values)):
                data = encode_page(key, page)
                if self.storage.put(key, data):
                    self.stats.add(pages_written=1, bytes_written=len(data))
        finally:
            with self._lock:
                self._pending.difference_update(keys)
                self._pending_bytes -= size

    def wait(self) -> None:
        """Return once every page sent down so far is written (saved sessions read the tier after)."""
        self.writer.submit(lambda: None).result()

    def close(self) -> None:
        self.writer.shutdown(wait=True)
