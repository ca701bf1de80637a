"""What a rank or node serves, as comparable text: its config and its checkpoint's size.

Ranks of one tensor-parallel group, and the nodes of one server, must serve
the same model with the same settings. Each describes itself the same way and
the descriptions are compared: the first difference is named in the error.
This module needs no torch: node 0's API process compares nodes with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

# What may differ between ranks: a node's own place, where the checkpoint sits on its host (the
# checkpoint itself is compared by size), and where HTTP listens (only node 0 listens).
MAY_DIFFER = frozenset({"parallel.node_rank", "model.path", "server.host", "server.port"})
# Compared by digest: descriptions cross the network between nodes.
SECRET = frozenset({"server.api_key"})


def describe_rank(config) -> dict[str, str | int | None]:
    """``{"section.key": value}`` of everything that must match, and the checkpoint's size."""
    description = {}
    for section, values in dataclasses.asdict(config).items():
        if isinstance(values, dict):
            description.update({f"{section}.{key}": repr(value) for key, value in values.items()})
        else:
            description[section] = repr(values)
    for key in MAY_DIFFER:
        description.pop(key, None)
    for key in SECRET:
        if key in description:
            description[key] = "sha256:" + hashlib.sha256(description[key].encode()).hexdigest()[:16]
    path = config.model.path
    description["checkpoint size"] = _size_of(path) if path else None
    return description


def first_difference(reference: dict, other: dict) -> str | None:
    """``"key: other's value against reference's"`` for the first key (in order) they differ on."""
    for key in sorted(set(reference) | set(other)):
        if reference.get(key) != other.get(key):
            return f"{key}: {other.get(key)} against {reference.get(key)}"
    return None


def _size_of(path: str) -> int | None:
    if os.path.isfile(path):
        return os.path.getsize(path)
    if os.path.isdir(path):
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    return None
