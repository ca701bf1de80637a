"""Ranks of one tensor-parallel group must serve the same model with the same settings.

Each rank describes what it serves (every config value, and the checkpoint's
size on disk) and the descriptions are gathered at start-up; a rank that
differs from rank 0 stops the start with an error naming the value and both
sides. On one host the ranks share a config anyway; the check matters once
ranks start from their own command lines.
"""

from __future__ import annotations

import dataclasses
import os

from tercet.errors import ConfigError
from tercet.model.tensor_parallel import TensorParallel


def describe_rank(config) -> dict[str, object]:
    """``{"section.key": value}`` of everything that must match, and the checkpoint's size."""
    description = {}
    for section, values in dataclasses.asdict(config).items():
        if isinstance(values, dict):
            description.update({f"{section}.{key}": repr(value) for key, value in values.items()})
        else:
            description[section] = repr(values)
    path = config.model.path
    description["checkpoint size"] = _size_of(path) if path else None
    return description


def check_group_agrees(description: dict[str, object], tp: TensorParallel) -> None:
    """Raise a ConfigError on every rank if any rank's description differs from rank 0's."""
    if not tp.enabled:
        return
    import torch.distributed as dist

    gathered: list = [None] * tp.size
    dist.all_gather_object(gathered, description, group=tp.group)
    first = gathered[0]
    for rank, other in enumerate(gathered[1:], start=1):
        for key in sorted(set(first) | set(other)):
            if first.get(key) != other.get(key):
                raise ConfigError(
                    f"tensor-parallel rank {rank} disagrees with rank 0 on {key}: {other.get(key)} against "
                    f"{first.get(key)}; every rank of a group must serve the same model with the same settings"
                )


def _size_of(path: str) -> int | None:
    if os.path.isfile(path):
        return os.path.getsize(path)
    if os.path.isdir(path):
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    return None
