"""The chosen tier's calls, contained: a tier that raises loses that page, never the scheduler."""

from __future__ import annotations

from tercet.containment import ContainedFailures


class ContainedStorage:
    def __init__(self, storage, plugin_name: str | None, failures: ContainedFailures):
        self.storage = storage
        self.plugin_name = plugin_name
        self.failures = failures
        self.persistent = bool(getattr(storage, "persistent", False))

    def _failed(self, call: str, key: str) -> None:
        self.failures.record("kv_storage", f"KV storage {call}({key[:16]}...) failed", self.plugin_name)

    def get(self, key: str) -> bytes | None:
        try:
            return self.storage.get(key)
        except Exception:
            self._failed("get", key)
            return None

    def put(self, key: str, data: bytes) -> bool:
        try:
            self.storage.put(key, data)
            return True
        except Exception:
            self._failed("put", key)
            return False

    def contains(self, key: str) -> bool:
        try:
            return bool(self.storage.contains(key))
        except Exception:
            self._failed("contains", key)
            return False

    def discard(self, key: str) -> None:
        try:
            self.storage.discard(key)
        except Exception:
            self._failed("discard", key)

    def close(self) -> None:
        try:
            self.storage.close()
        except Exception:
            self._failed("close", "-")
