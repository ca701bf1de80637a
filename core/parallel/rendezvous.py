"""Where tensor-parallel groups meet when they may span nodes: a torch.distributed TCPStore.

Node 0 runs it in a child process of its own (``tercet rendezvous``), so the
API process never imports torch. Every worker of every group connects to it
as a client and joins its group under the group's own prefix; it holds
nothing but the groups' rendezvous keys. It listens on node 0's address, on a
port the system picks, which node 0 hands to the other nodes as they join.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

from tercet.processes.child import run_child
from tercet.processes.title import set_process_title


def run_rendezvous_process(config, host: str, ready_writer) -> None:
    set_process_title("tercet rendezvous (tp groups)")
    # c10d warns for each client whose host name has no reverse lookup, common between nodes.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    run_child("rendezvous", config, ready_writer, lambda context: _open_store(host), "rendezvous")


class _Store:
    def __init__(self, store):
        self.store = store  # held: the store serves for as long as this process lives

    def run_forever(self) -> None:
        threading.Event().wait()


def _open_store(host: str):
    import torch.distributed as dist

    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    return _Store(store), {"store": f"{host}:{store.port}"}


def join_group_through_store(store_address: str, group: str, rank: int, size: int, backend: str, timeout: timedelta):
    """``torch.distributed.init_process_group`` for ``rank`` of ``size``, meeting at ``store_address``."""
    import torch.distributed as dist

    host, _, port = store_address.rpartition(":")
    store = dist.TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timeout)
    dist.init_process_group(
        backend, store=dist.PrefixStore(f"tercet/{group}/", store), rank=rank, world_size=size, timeout=timeout
    )
