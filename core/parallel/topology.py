"""Where each scheduler worker runs: data-parallel ranks of TP groups, spread over nodes.

The ``dp_size * tp_size`` workers are numbered DP rank by DP rank (``dp_rank *
tp_size + tp_rank``) and cut into ``nnodes`` equal runs, node 0 first. So a TP
group spans nodes when ``tp_size`` is more than a node's share (tp=2 on two
nodes: one rank each), and DP ranks land on different nodes when it is less
(dp=2 on two nodes: one rank each). Each node is started with the same config
and works out the same placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from tercet.errors import ConfigError


@dataclass(frozen=True)
class Worker:
    dp_rank: int
    tp_rank: int
    node: int


@dataclass(frozen=True)
class Topology:
    dp_size: int
    tp_size: int
    nnodes: int = 1

    def __post_init__(self):
        workers = self.dp_size * self.tp_size
        if workers % self.nnodes:
            raise ConfigError(
                f"parallel.nnodes = {self.nnodes} does not divide the {workers} scheduler workers "
                f"(scheduler.dp_size {self.dp_size} x parallel.tp_size {self.tp_size}); every node runs an equal share"
            )

    @classmethod
    def of(cls, config) -> "Topology":
        return cls(config.scheduler.dp_size, config.parallel.tp_size, config.parallel.nnodes)

    @property
    def workers_per_node(self) -> int:
        return self.dp_size * self.tp_size // self.nnodes

    def node_of(self, dp_rank: int, tp_rank: int) -> int:
        return (dp_rank * self.tp_size + tp_rank) // self.workers_per_node

    @property
    def workers(self) -> tuple[Worker, ...]:
        return tuple(
            Worker(dp_rank, tp_rank, self.node_of(dp_rank, tp_rank))
            for dp_rank in range(self.dp_size) for tp_rank in range(self.tp_size)
        )

    def workers_on(self, node: int) -> tuple[Worker, ...]:
        return tuple(worker for worker in self.workers if worker.node == node)

    def groups_on(self, node: int) -> dict[int, tuple[Worker, ...]]:
        """This node's workers by DP rank: each group comes up together (its TP ranks meet)."""
        groups: dict[int, tuple[Worker, ...]] = {}
        for worker in self.workers_on(node):
            groups[worker.dp_rank] = groups.get(worker.dp_rank, ()) + (worker,)
        return groups

    def receiving_node(self, dp_rank: int) -> int:
        """The node whose TP rank 0 binds this DP rank's input socket."""
        return self.node_of(dp_rank, 0)

    @property
    def spans_nodes(self) -> bool:
        return self.nnodes > 1


def scheduler_name(rank: int, tp_rank: int, dp_size: int, tp_size: int) -> str:
    """The process's name in logs and failures: ``scheduler``, ``scheduler-1``, ``scheduler-1-tp0``…"""
    name = "scheduler" if dp_size == 1 else f"scheduler-{rank}"
    return name if tp_size == 1 else f"{name}-tp{tp_rank}"
