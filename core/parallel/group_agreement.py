"""Ranks of one tensor-parallel group must serve the same model with the same settings.

Each rank describes what it serves (every config value, and the checkpoint's
size on disk) and the descriptions are gathered at start-up; a rank that
differs from rank 0 stops the start with an error naming the value and both
sides. On one host the ranks share a config anyway; the check matters once
ranks start from their own command lines, on other nodes (where node 0 also
compares each joining node's description with its own).
"""

from __future__ import annotations

from tercet.errors import ConfigError
from tercet.model.tensor_parallel import TensorParallel
from tercet.parallel.description import first_difference


def check_group_agrees(description: dict[str, object], tp: TensorParallel) -> None:
    """Raise a ConfigError on every rank if any rank's description differs from rank 0's."""
    if not tp.enabled:
        return
    import torch.distributed as dist

    gathered: list = [None] * tp.size
    dist.all_gather_object(gathered, description, group=tp.group)
    for rank, other in enumerate(gathered[1:], start=1):
        difference = first_difference(gathered[0], other)
        if difference is not None:
            raise ConfigError(
                f"tensor-parallel rank {rank} disagrees with rank 0 on {difference}; "
                "every rank of a group must serve the same model with the same settings"
            )
