"""Joining a data-parallel rank's tensor-parallel group: where its ranks meet, and their agreement.

The ranks of one group meet in a file of the instance's private runtime
directory when they share a host, or at node 0's rendezvous store when the
group may span nodes; once joined, they compare what each serves
(:func:`check_group_agrees`) before any weight is loaded.
"""

from __future__ import annotations

from datetime import timedelta

from tercet.model.tensor_parallel import SINGLE, TensorParallel
from tercet.parallel.description import describe_rank
from tercet.parallel.group_agreement import check_group_agrees
from tercet.parallel.rendezvous import join_group_through_store


def join_tensor_parallel_group(config, port_args, rank: int, tp_rank: int):
    """This process's place in its data-parallel rank's TP group (:data:`SINGLE` without one)."""
    tp_size = config.parallel.tp_size
    if tp_size == 1:
        return SINGLE
    import torch.distributed as dist

    backend = "nccl" if config.model.device.startswith("cuda") else "gloo"
    # Peers wait in a broadcast while rank 0 is idle; it speaks every few seconds.
    timeout = timedelta(seconds=config.server.startup_timeout + 600)
    if port_args.tp_store is not None:
        # The group may span nodes: its ranks meet at node 0's rendezvous store.
        join_group_through_store(port_args.tp_store, f"tp-group-{rank}", tp_rank, tp_size, backend, timeout)
    else:
        # A file in the instance's private runtime directory: the ranks meet there, on this host.
        dist.init_process_group(
            backend, init_method=f"file://{port_args.runtime_dir}/tp-group-{rank}", rank=tp_rank, world_size=tp_size,
            timeout=timeout,
        )
    tp = TensorParallel(tp_rank, tp_size)
    check_group_agrees(describe_rank(config), tp)
    return tp
