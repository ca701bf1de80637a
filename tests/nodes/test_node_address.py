import pytest

from tercet.errors import ConfigError
from tercet.nodes.address import DistInitAddr, interface_of, pin_collectives_to


@pytest.mark.parametrize("text, host, port", [("10.0.0.1:29500", "10.0.0.1", 29500), ("node0:1", "node0", 1),
                                              ("[::1]:29500", "::1", 29500)])
def test_dist_init_addr_is_host_and_port(text, host, port):
    assert DistInitAddr.parse(text) == DistInitAddr(host, port)


@pytest.mark.parametrize("text", ["10.0.0.1", ":29500", "host:port", "host:0", "host:70000"])
def test_a_bad_dist_init_addr_is_named(text):
    with pytest.raises(ConfigError, match="parallel.dist_init_addr must be HOST:PORT"):
        DistInitAddr.parse(text)


def test_nnodes_needs_a_dist_init_addr():
    with pytest.raises(ConfigError, match="needs parallel.dist_init_addr"):
        DistInitAddr.parse(None)


def test_an_address_is_found_on_its_interface():
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("192.0.2.77") is None  # TEST-NET-1: on no interface here


def test_collectives_are_pinned_to_the_interface_unless_chosen():
    environ = {"NCCL_SOCKET_IFNAME": "eth9"}
    pin_collectives_to("127.0.0.1", environ)
    assert environ == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "eth9"}
