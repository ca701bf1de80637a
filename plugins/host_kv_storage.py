"""The "host" KV storage tier: evicted pages kept in this process's memory, least recently used out first.

``[cache] storage = "host"``; ``[cache] host_bytes`` is its budget (each data-parallel
rank keeps its own). What it holds is lost with the process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from tercet.plugin_api import KVStorage, hookimpl, parse_byte_size


class HostKVStorage(KVStorage):
    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self.num_bytes = 0
        self._pages: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()  # the writer and reader threads call at once

    @classmethod
    def from_config(cls, config) -> "HostKVStorage":
        return cls(parse_byte_size(config.cache.host_bytes, "cache.host_bytes"))

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._pages.get(key)
            if data is not None:
                self._pages.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        data = bytes(data)
        with self._lock:
            self._drop(key)
            if len(data) > self.budget_bytes:
                return
            self._pages[key] = data
            self.num_bytes += len(data)
            while self.num_bytes > self.budget_bytes:
                self._drop(next(iter(self._pages)))

    def contains(self, key: str) -> bool:
        with self._lock:
            return key in self._pages

    def discard(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def _drop(self, key: str) -> None:
        data = self._pages.pop(key, None)
        if data is not None:
            self.num_bytes -= len(data)


@hookimpl
def register_kv_storages(register):
    register("host", HostKVStorage.from_config)
