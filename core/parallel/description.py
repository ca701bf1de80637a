"""What a rank or node serves, as comparable text: its config and its checkpoint's size.

Ranks of one tensor-parallel group, and the nodes of one server, must serve
the same model with the same settings. Each describes itself the same way and
the descriptions are compared: the first difference is named in the error.
This module needs no torch: node 0's API process compares nodes with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os

# What may differ between ranks: a node's own place, where the checkpoint sits on its host (the
# checkpoint itself is compared by size), where HTTP listens (only node 0 listens), and the node
# secret, which is never sent (nodes prove they hold it, tercet.nodes.handshake) nor where it is read from.
MAY_DIFFER = frozenset({"parallel.node_rank", "model.path", "server.host", "server.port", "parallel.node_secret",
                        "parallel.node_secret_file"})
# Compared by digest: descriptions cross the network between nodes. Keyed by the node secret, so
# that one overheard digest cannot be tried against guesses offline.
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
    digest_key = (config.parallel.node_secret or "").encode()
    for key in SECRET:
        if key in description:
            description[key] = "hmac-sha256:" + hmac.new(digest_key, description[key].encode(), hashlib.sha256).hexdigest()
    path = config.model.path
    description["checkpoint size"] = _size_of(path) if path else None
    return description


def first_differing_key(reference: dict, other: dict) -> str | None:
    """The first key (in order) the two descriptions differ on."""
    for key in sorted(set(reference) | set(other)):
        if reference.get(key) != other.get(key):
            return key
    return None


def first_difference(reference: dict, other: dict) -> str | None:
    """``"key: other's value against reference's"`` for the first key (in order) they differ on: for a
    process to say about its own group. Across nodes only the key is told (:func:`first_differing_key`)."""
    key = first_differing_key(reference, other)
    return None if key is None else f"{key}: {other.get(key)} against {reference.get(key)}"


def _size_of(path: str) -> int | None:
    if os.path.isfile(path):
        return os.path.getsize(path)
    if os.path.isdir(path):
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    return None
