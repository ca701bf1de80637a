"""The "file" KV storage tier: one file per page in a directory, kept across restarts and shared by servers.

``[cache] storage = "file"``, ``[cache] file_dir`` (default ``<tercet cache dir>/kv_pages``)
and ``[cache] file_bytes``, the budget of the whole directory. Pages are
``<file_dir>/pages/<key>.page``; each file frames its bytes with their length and
a sha256, checked on every read: a truncated or corrupt file is deleted with a
log line and answered as a miss. Several servers may share the directory:

- a file is written under a temporary name and renamed, so no reader sees half of one;
- a file another server deleted is a miss, never an error;
- least recently used goes first: a read touches the file's mtime, and a writer
  that finds its view over budget (or has not looked for ``RESCAN_SECONDS``)
  rebuilds the view from the directory itself (every server's files, by mtime)
  and deletes the oldest until the whole directory is under budget.

Saved sessions (``POST /sessions/{name}/save``) live in ``<file_dir>/sessions/``, outside the budget.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

from tercet.plugin_api import KVStorage, default_cache_dir, hookimpl, parse_byte_size

logger = logging.getLogger(__name__)
MAGIC = b"TKVF1\n"
_FRAME = struct.Struct("<Q32s")  # length of the data, its sha256
SUFFIX = ".page"
# Evicting goes down to this share of the budget, so a full directory is not rescanned at every write.
LOW_WATER = 0.9
# Seconds between looks at the whole directory when under budget here: other servers write to it too.
RESCAN_SECONDS = 5.0
# A temporary file older than this was left by a server that died while writing it.
STALE_TEMPORARY_SECONDS = 3600.0


class FileKVStorage(KVStorage):
    persistent = True

    def __init__(self, directory: str | Path, budget_bytes: int, rescan_seconds: float = RESCAN_SECONDS):
        self.directory = Path(directory) / "pages"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.budget_bytes = budget_bytes
        self.rescan_seconds = rescan_seconds
        self._last_scan = float("-inf")
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] = OrderedDict()  # key -> file size, least recently used first
        self.num_bytes = 0
        self._rescan()

    @classmethod
    def from_config(cls, config) -> "FileKVStorage":
        cache = config.cache
        directory = cache.file_dir or Path(default_cache_dir()) / "kv_pages"
        return cls(directory, parse_byte_size(cache.file_bytes, "cache.file_bytes"))

    def path_of(self, key: str) -> Path:
        if not key.isalnum():  # keys are hex digests; anything else must not become a path
            raise ValueError(f"a KV page key is hex digits, not {key[:40]!r}")
        return self.directory / (key + SUFFIX)

    def get(self, key: str) -> bytes | None:
        path = self.path_of(key)
        try:
            framed = path.read_bytes()
        except FileNotFoundError:  # never written here, or another server deleted it
            self._forget(key)
            return None
        data = self._unframe(framed)
        if data is None:
            logger.warning("dropped corrupt or truncated KV page file %s", path)
            self.discard(key)
            return None
        try:
            os.utime(path)  # recently used, for every server sharing the directory
        except OSError:
            pass
        with self._lock:
            if key in self._sizes:
                self._sizes.move_to_end(key)
        return data

    def put(self, key: str, data: bytes) -> None:
        path = self.path_of(key)
        framed = MAGIC + _FRAME.pack(len(data), hashlib.sha256(data).digest()) + bytes(data)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(framed)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        with self._lock:
            self.num_bytes += len(framed) - self._sizes.pop(key, 0)
            self._sizes[key] = len(framed)
            over = self.num_bytes > self.budget_bytes
        if over or time.monotonic() - self._last_scan >= self.rescan_seconds:
            self._shrink()

    def contains(self, key: str) -> bool:
        with self._lock:
            if key in self._sizes:
                return True
        path = self.path_of(key)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return False
        with self._lock:  # another server wrote it: it counts against the budget here too
            if key not in self._sizes:
                self._sizes[key] = size
                self.num_bytes += size
        return True

    def discard(self, key: str) -> None:
        self.path_of(key).unlink(missing_ok=True)
        self._forget(key)

    def _forget(self, key: str) -> None:
        with self._lock:
            self.num_bytes -= self._sizes.pop(key, 0)

    @staticmethod
    def _unframe(framed: bytes) -> bytes | None:
        start = len(MAGIC) + _FRAME.size
        if len(framed) < start or framed[:len(MAGIC)] != MAGIC:
            return None
        length, digest = _FRAME.unpack_from(framed, len(MAGIC))
        data = framed[start:]
        if len(data) != length or hashlib.sha256(data).digest() != digest:
            return None
        return data

    def _rescan(self) -> None:
        """The view of the directory rebuilt from the directory: every server's pages, oldest first."""
        found, now = [], time.time()
        self._last_scan = time.monotonic()
        with os.scandir(self.directory) as entries:
            for entry in entries:
                try:
                    status = entry.stat()
                except FileNotFoundError:
                    continue
                if entry.name.endswith(SUFFIX):
                    found.append((status.st_mtime, entry.name[:-len(SUFFIX)], status.st_size))
                elif entry.name.startswith(".tmp-") and now - status.st_mtime > STALE_TEMPORARY_SECONDS:
                    Path(entry.path).unlink(missing_ok=True)
        found.sort()
        with self._lock:
            self._sizes = OrderedDict((key, size) for _, key, size in found)
            self.num_bytes = sum(size for _, _, size in found)

    def _shrink(self) -> None:
        """Delete the least recently used pages of the whole directory until it is under its budget."""
        self._rescan()
        while True:
            with self._lock:
                if self.num_bytes <= self.budget_bytes * LOW_WATER or not self._sizes:
                    return
                key, size = self._sizes.popitem(last=False)
                self.num_bytes -= size
            self.path_of(key).unlink(missing_ok=True)  # gone already: another server shrank it too


@hookimpl
def register_kv_storages(register):
    register("file", FileKVStorage.from_config)
