"""Decode steps replayed from captured graphs, one per batch-size bucket.

At start-up the runner captures its decode forward (one new token per
sequence) at every bucket size up to ``model.cuda_graph_max_batch``; each
step of a decode batch then copies its inputs into the graphs' static
buffers, pads them to the smallest bucket that holds the batch, replays that
bucket's graph and reads the first rows of its output. A step with prompt
tokens in it, or a batch larger than the largest bucket, runs eagerly.

Padding rows must be harmless: each writes its K/V to a scratch slot that
the page allocator never hands out, and attends over one key of sequence
row 0 (whatever it holds: the row's output is dropped). Every replay resets
the padding, so a slot written by a larger batch before is never reused.

Capturing is behind :class:`GraphCapturer` (CUDA graphs on a GPU), so the
bucket choice, the copying and the padding are tested on a CPU with a
stand-in that runs the step eagerly at each replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from tercet.model.forward_batch import ForwardBatch

# The columns of a decode batch the graphs read, copied in at every replay.
STATIC_COLUMNS = ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "prefix_lens", "seq_lens")
# What a padding row holds in each column (its out_cache_loc is the scratch slot).
PADDING = {"input_ids": 0, "positions": 0, "req_pool_indices": 0, "prefix_lens": 0, "seq_lens": 1}


def bucket_sizes(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 8, up to and including ``max_batch``."""
    small = [size for size in (1, 2, 4) if size < max_batch]
    return tuple(sorted({*small, *range(8, max_batch + 1, 8), max_batch}))


@dataclass(frozen=True)
class CapturedGraph:
    replay: Callable[[], None]
    output: torch.Tensor  # rewritten in place by every replay


class GraphCapturer(Protocol):
    def capture(self, step: Callable[[], torch.Tensor]) -> CapturedGraph:
        """Record ``step`` (run once or more while capturing) so that ``replay`` reruns it."""


class CudaGraphCapturer:
    """Captures with ``torch.cuda.CUDAGraph``; every graph shares one memory pool."""

    def __init__(self):
        self.pool = None

    def capture(self, step: Callable[[], torch.Tensor]) -> CapturedGraph:
        # A warm-up run on a side stream first: kernels compile and lazy state is built outside the graph.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = step()
        self.pool = graph.pool()
        return CapturedGraph(graph.replay, output)


class DecodeGraphs:
    """A captured decode step per bucket, and the static inputs they all read."""

    def __init__(self, step: Callable[[ForwardBatch], torch.Tensor], max_batch: int, scratch_slot: int,
                 max_seq_len: int, device: torch.device):
        self.step = step
        self.buckets = bucket_sizes(max_batch)
        self.scratch_slot = scratch_slot
        self.max_seq_len = max_seq_len
        self.inputs = {name: torch.zeros(max_batch, dtype=torch.int64, device=device) for name in STATIC_COLUMNS}
        self.graphs: dict[int, CapturedGraph] = {}

    def capture(self, capturer: GraphCapturer) -> None:
        # Largest first: smaller graphs then fit in the memory the larger ones' pool already holds.
        for size in reversed(self.buckets):
            self._pad(0, size)
            batch = self._static_batch(size)
            self.graphs[size] = capturer.capture(lambda batch=batch: self.step(batch))

    def bucket_for(self, batch: ForwardBatch) -> int | None:
        """The smallest bucket holding ``batch``; None when it must run eagerly."""
        if not batch.is_decode_only:
            return None
        return next((size for size in self.buckets if size >= batch.batch_size), None)

    def replay(self, batch: ForwardBatch) -> torch.Tensor | None:
        """Logits ``[B, vocab]`` of a decode batch from its bucket's graph; None: run it eagerly."""
        size = self.bucket_for(batch)
        if size is None or size not in self.graphs:
            return None
        num = batch.batch_size
        for name in STATIC_COLUMNS:
            self.inputs[name][:num].copy_(getattr(batch, name))
        self._pad(num, size)
        graph = self.graphs[size]
        graph.replay()
        return graph.output[:num].clone()

    def _pad(self, start: int, end: int) -> None:
        for name, value in PADDING.items():
            self.inputs[name][start:end].fill_(value)
        self.inputs["out_cache_loc"][start:end].fill_(self.scratch_slot)

    def _static_batch(self, size: int) -> ForwardBatch:
        columns = {name: buffer[:size] for name, buffer in self.inputs.items()}
        ones = torch.ones(size, dtype=torch.int64, device=columns["seq_lens"].device)
        return ForwardBatch(
            **columns, extend_lens=ones, extend_start_loc=torch.arange(size, device=ones.device),
            # A host bound only a backend without graph support reads (torch_native's gather width).
            max_extend_len=1, max_seq_len=self.max_seq_len, num_tokens=size,
            host_extend_lens=None, host_seq_lens=None,
        )
