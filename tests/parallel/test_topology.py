import pytest

from tercet.config import TercetConfig
from tercet.errors import ConfigError
from tercet.parallel.topology import Topology, Worker


def test_one_host_holds_every_worker():
    topology = Topology(dp_size=2, tp_size=2)
    assert topology.workers_on(0) == topology.workers
    assert [(worker.dp_rank, worker.tp_rank) for worker in topology.workers] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert not topology.spans_nodes


def test_a_tp_group_spans_nodes_when_it_is_bigger_than_a_share():
    topology = Topology(dp_size=1, tp_size=2, nnodes=2)
    assert topology.workers_on(0) == (Worker(0, 0, 0),)
    assert topology.workers_on(1) == (Worker(0, 1, 1),)
    assert topology.receiving_node(0) == 0
    assert topology.groups_on(1) == {0: (Worker(0, 1, 1),)}


def test_dp_ranks_land_on_nodes_when_a_group_is_smaller_than_a_share():
    topology = Topology(dp_size=2, tp_size=1, nnodes=2)
    assert topology.workers_on(1) == (Worker(1, 0, 1),)
    assert [topology.receiving_node(rank) for rank in range(2)] == [0, 1]


def test_groups_may_straddle_nodes_and_rank_0_decides_who_receives():
    # 6 workers over 3 nodes: dp1's TP rank 0 sits on node 1, its other ranks on node 2.
    topology = Topology(dp_size=2, tp_size=3, nnodes=3)
    assert topology.groups_on(1) == {0: (Worker(0, 2, 1),), 1: (Worker(1, 0, 1),)}
    assert topology.receiving_node(1) == 1
    assert [len(topology.workers_on(node)) for node in range(3)] == [2, 2, 2]


def test_workers_must_split_evenly():
    with pytest.raises(ConfigError, match="parallel.nnodes = 2 does not divide the 3 scheduler workers"):
        Topology(dp_size=3, tp_size=1, nnodes=2)


def test_of_reads_the_config():
    config = TercetConfig().replace("parallel", tp_size=2, nnodes=2).replace("scheduler", dp_size=2)
    assert Topology.of(config) == Topology(2, 2, 2)
