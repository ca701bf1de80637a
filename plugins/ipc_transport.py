"""The default transport: ZeroMQ ipc sockets in the instance's private runtime directory."""

from __future__ import annotations

import os

from tercet.plugin_api import hookimpl


class IpcTransport:
    def __init__(self, ipc_config):
        self.ipc_config = ipc_config

    def endpoint(self, name: str, runtime_dir: str) -> str:
        return f"ipc://{os.path.join(runtime_dir, name)}"


@hookimpl
def register_transports(register):
    register("ipc", IpcTransport)
