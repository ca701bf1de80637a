"""Every endpoint of one server instance, named before any process starts."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from tercet.ipc.runtime_dir import SHARED_METRICS_DIR, create_runtime_dir


@dataclass(frozen=True)
class PortArgs:
    # Private per-instance directory (mode 0700) for ipc sockets, the file naming its
    # owner (see tercet.ipc.runtime_dir) and, with several API workers, their metrics files.
    runtime_dir: str
    # edge 1: TokenizerManager -> Scheduler, one per data-parallel rank (each scheduler binds its own)
    scheduler_inputs: tuple[str, ...]
    # edge 2: Scheduler -> DetokenizerManager (the detokenizer binds)
    detokenizer_input: str
    # edge 3: DetokenizerManager -> TokenizerManager, one per API worker (each worker's
    # TokenizerManager binds its own; tercet.ipc.result_routes routes each result to its
    # owner); the schedulers also send their control replies here.
    tokenizer_inputs: tuple[str, ...]
    # host:port of the torch.distributed TCPStore where TP groups meet when they may span
    # nodes (node 0 holds it); None: they meet through a file in runtime_dir, on one host.
    tp_store: str | None = None

    @classmethod
    def create(cls, transport, parent_dir: str | None = None, dp_size: int = 1, api_workers: int = 1) -> "PortArgs":
        runtime_dir = create_runtime_dir(parent_dir)
        return cls(
            runtime_dir=runtime_dir,
            scheduler_inputs=tuple(transport.endpoint(f"scheduler_input_{rank}", runtime_dir) for rank in range(dp_size)),
            detokenizer_input=transport.endpoint("detokenizer", runtime_dir),
            # Worker 1's keeps the name it had before there were several.
            tokenizer_inputs=tuple(
                transport.endpoint("tokenizer" if worker == 0 else f"tokenizer_{worker + 1}", runtime_dir)
                for worker in range(api_workers)
            ),
        )

    @property
    def scheduler_input(self) -> str:
        """Rank 0's input: the only one without data parallelism."""
        return self.scheduler_inputs[0]

    @property
    def tokenizer_input(self) -> str:
        """API worker 1's result endpoint: the only one with ``server.api_workers = 1``."""
        return self.tokenizer_inputs[0]

    @property
    def shared_metrics_dir(self) -> str:
        """Where several API workers keep their request metrics, summed at each scrape."""
        return os.path.join(self.runtime_dir, SHARED_METRICS_DIR)

    def remove_runtime_dir(self) -> None:
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
