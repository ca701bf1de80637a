"""Where the nodes of one server meet, and the interface a node's collectives use.

A node's address is the one its link to node 0 leaves from (the source
address the kernel chose for it). Collectives (gloo, NCCL) are pinned to the
interface holding that address, since the host name may resolve to loopback,
which other nodes cannot reach.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tercet.errors import ConfigError


@dataclass(frozen=True)
class DistInitAddr:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str | None) -> "DistInitAddr":
        if not text:
            raise ConfigError("parallel.nnodes > 1 needs parallel.dist_init_addr (--dist-init-addr HOST:PORT), node 0's address")
        host, separator, port = text.rpartition(":")
        host = host.strip("[]")
        if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"parallel.dist_init_addr must be HOST:PORT, got {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def interface_of(address: str) -> str | None:
    """The network interface holding ``address``, if any does."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address.split("%")[0] == address for entry in addresses):
            return name
    return None


def pin_collectives_to(address: str, environ=os.environ) -> None:
    """Make gloo and NCCL bind where other nodes can reach them, unless the user already chose
    (in ``environ``, which the workers this process spawns inherit)."""
    interface = interface_of(address)
    if interface is None:
        return
    for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        environ.setdefault(variable, interface)
