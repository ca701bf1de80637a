"""What every rank of a tensor-parallel group has settled: the grammar compiles all of them may act on.

Each TP rank compiles a constrained request's grammar in its own threads, so
one rank may finish before another. The ranks must admit the request at the
same step (their batches must match, or the collectives inside the model do
not line up), and none may wait for the slowest compile. So at each step that
has compiles pending every rank gathers every rank's settled outcomes
(``torch.distributed.all_gather_object``) and acts only on what all of them
settled. The pending groups are the same on every rank (the same messages in
the same order, :mod:`tercet.scheduler.tensor_parallel_inbox`), so every rank
reaches the gather at the same step.

When the ranks' outcomes differ (one timed out, one failed), every rank takes
the first failure in rank order: the request ends everywhere with the same
error, which rank 0 sends.
"""

from __future__ import annotations

from tercet.model.tensor_parallel import TensorParallel
from tercet.scheduler.grammar.compiler import Outcome


def agreed_outcomes(tp: TensorParallel, settled: dict[str, Outcome]) -> dict[str, Outcome]:
    """The outcomes, by request id, of what every rank of ``tp`` has settled."""
    if not tp.enabled:
        return settled
    import torch.distributed as dist

    every_rank: list = [None] * tp.size
    dist.all_gather_object(every_rank, settled, group=tp.group)
    return merged_outcomes(every_rank)


def merged_outcomes(every_rank: list[dict[str, Outcome]]) -> dict[str, Outcome]:
    """The ids every rank settled, each with the first failure among the ranks (None when none failed)."""
    common = set(every_rank[0]).intersection(*every_rank[1:])
    return {
        rid: next((outcomes[rid] for outcomes in every_rank if outcomes[rid] is not None), None)
        for rid in common
    }
