"""tcp transport: each edge on its own port of ``[ipc] tcp_host`` (loopback by default).

Ports are picked when PortArgs is built, before any process starts, so every
process is handed complete addresses; data-parallel ranks on other hosts would
be given the same addresses.
"""

from __future__ import annotations

import socket

from tercet.plugin_api import hookimpl


class TcpTransport:
    def __init__(self, ipc_config):
        self.host = ipc_config.tcp_host

    def endpoint(self, name: str, runtime_dir: str) -> str:
        return f"tcp://{self.host}:{find_free_port(self.host)}"


def find_free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@hookimpl
def register_transports(register):
    register("tcp", TcpTransport)
