"""A step's outputs read back to the host: the one place a step waits for the device.

Everything else a step does is queued on the device; the sampled token ids
(with their log-probabilities, packed into one tensor) are the one thing the
host must have before it can go on. On CUDA the copy lands in pinned memory
with ``non_blocking``, so it is one DMA on the step's stream rather than a
pageable staging copy, and the host waits on that stream once. torch's host
allocator caches pinned blocks, so the buffer of one step is reused by the
next. On a CPU the tensor already is host memory: it is read as it is.
"""

from __future__ import annotations

from typing import Callable

import torch


def copy_to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in host memory, complete: the device is waited for here and nowhere else."""
    if tensor.device.type == "cpu":
        return tensor
    if tensor.device.type != "cuda":
        return tensor.cpu()  # another accelerator: its own blocking copy
    return pinned_copy(tensor, torch.empty, torch.cuda.current_stream(tensor.device).synchronize)


def read_back(tensor: torch.Tensor) -> list:
    """``tensor.tolist()``, through :func:`copy_to_host`."""
    return copy_to_host(tensor).tolist()


def pinned_copy(tensor: torch.Tensor, allocate: Callable, wait: Callable[[], None]) -> torch.Tensor:
    """Copy a device ``tensor`` into pinned memory from ``allocate`` without blocking, then ``wait``
    for the device's stream (the copy is not there to read before it)."""
    host = allocate(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    wait()
    return host
