import logging
import threading

import pytest
from test_node_link import linked_pair

from tercet.cli import build_parser, config_from_arguments
from tercet.config import TercetConfig
from tercet.errors import ConfigError, TercetError
from tercet.nodes.launch import _follow_node_zero, config_for_nodes


SECRET = "a node secret of 24 chars"


def nodes_config(**parallel) -> TercetConfig:
    settings = {"nnodes": 2, "dist_init_addr": "10.0.0.1:29500", "node_secret": SECRET, **parallel}
    return TercetConfig().replace("parallel", **settings)


def test_the_node_flags_set_the_parallel_section():
    arguments = build_parser().parse_args(
        ["serve", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:29500", "--tp-size", "2"]
    )
    parallel = config_from_arguments(arguments).parallel
    assert (parallel.nnodes, parallel.node_rank, parallel.dist_init_addr, parallel.tp_size) == (2, 1, "10.0.0.1:29500", 2)


def test_over_nodes_the_endpoints_are_tcp_on_node_0_s_address():
    config = config_for_nodes(nodes_config(tp_size=2))
    assert (config.ipc.transport, config.ipc.tcp_host) == ("tcp", "10.0.0.1")


def test_a_chosen_transport_and_host_are_kept():
    config = config_for_nodes(nodes_config(tp_size=2).replace("ipc", transport="tcp", tcp_host="0.0.0.0"))
    assert config.ipc.tcp_host == "0.0.0.0"


def test_a_node_rank_past_the_nodes_is_an_error():
    with pytest.raises(TercetError, match="parallel.node_rank = 2 is not below parallel.nnodes = 2"):
        config_for_nodes(nodes_config(tp_size=2, node_rank=2))


def test_the_workers_must_split_over_the_nodes():
    with pytest.raises(ConfigError, match="does not divide the 1 scheduler workers"):
        config_for_nodes(nodes_config())


def test_nodes_need_a_meeting_address():
    with pytest.raises(ConfigError, match="needs parallel.dist_init_addr"):
        config_for_nodes(nodes_config(tp_size=2, dist_init_addr=None))


def test_nodes_need_a_secret_and_are_told_how_to_make_one():
    with pytest.raises(ConfigError, match=r"parallel.nnodes = 2 needs a node secret, so that only your nodes can join "
                                          r"node 0: set parallel.node_secret_file .*openssl rand -hex 32"):
        config_for_nodes(nodes_config(tp_size=2, node_secret=None))


def test_the_secret_is_read_from_its_file_once(tmp_path):
    secret_file = tmp_path / "node_secret"
    secret_file.write_text(SECRET + "\n")
    config = config_for_nodes(nodes_config(tp_size=2, node_secret=None, node_secret_file=str(secret_file)))
    assert (config.parallel.node_secret, config.parallel.node_secret_file) == (SECRET, None)


@pytest.mark.parametrize("stop, code, said", [
    ({"failed": True, "reason": "TercetError: cannot listen on 10.0.0.1:30000"}, 1,
     "node 0 stops the server on a failure (TercetError: cannot listen on 10.0.0.1:30000); stopping this node"),
    ({"failed": True}, 1, "node 0 stops the server on a failure; stopping this node"),
    ({"failed": False}, 0, "node 0 stops the server; stopping this node"),
])
def test_a_node_stops_when_node_0_does_and_says_why(caplog, stop, code, said):
    node, zero = linked_pair()
    stopped, outcome = threading.Event(), {"code": 1}
    try:
        zero.send("stop", **stop)
        with caplog.at_level(logging.INFO, logger="tercet.node"):
            _follow_node_zero(node, stopped, outcome)
    finally:
        node.close()
        zero.close()
    assert stopped.is_set() and outcome["code"] == code
    assert said in caplog.messages
