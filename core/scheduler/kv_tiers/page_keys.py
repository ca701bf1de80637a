"""A page's key: the hash of its token chain, seeded with everything that makes pages incompatible.

The K/V of a page depends on every token before it, not only its own: the key
of page ``i`` is ``sha256(key of page i-1, token ids of page i)``, starting
from a root that hashes the model's identity (its checkpoint, weights format,
dtype, KV shape and page size, tensor-parallel shard) and the LoRA namespace.
Two servers of the same model on one file tier share pages; any difference
that changes the bytes of a page changes its key, so a page is never read
back into a pool it does not fit.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from pathlib import Path

# Files of a checkpoint directory whose size and time say the weights changed.
CHECKPOINT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".json")


def checkpoint_fingerprint(model_path) -> list:
    """(name, size, mtime) of each weights or config file of the checkpoint at ``model_path``."""
    path = Path(model_path)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.suffix in CHECKPOINT_SUFFIXES)
    return [[file.name, *_size_and_time(file)] for file in files]


def _size_and_time(file: Path) -> tuple[int, int]:
    try:
        status = os.stat(file)
    except OSError:  # a file that vanished says nothing about the weights
        return -1, -1
    return status.st_size, status.st_mtime_ns


class PageKeys:
    def __init__(self, identity: dict, page_size: int):
        self.identity = identity
        self.page_size = page_size
        self.root = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).digest()

    @property
    def identity_hash(self) -> str:
        return self.root.hex()

    def keys(self, token_ids, namespace: str | None, num_pages: int | None = None) -> list[str]:
        """The keys of the first ``num_pages`` whole pages of ``token_ids`` (all of them by default)."""
        size = self.page_size
        whole = len(token_ids) // size
        num_pages = whole if num_pages is None else min(num_pages, whole)
        chain = hashlib.sha256(self.root + b"\0" + (namespace or "").encode()).digest()
        keys = []
        for index in range(num_pages):
            tokens = array("q", token_ids[index * size:(index + 1) * size]).tobytes()
            chain = hashlib.sha256(chain + tokens).digest()
            keys.append(chain.hex())
        return keys
