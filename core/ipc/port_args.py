"""Every endpoint of one server instance, named before any process starts."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from tercet.ipc.runtime_dir import create_runtime_dir


@dataclass(frozen=True)
class PortArgs:
    # Private per-instance directory (mode 0700) for ipc sockets and the file
    # naming its owner (see tercet.ipc.runtime_dir), nothing else.
    runtime_dir: str
    # edge 1: TokenizerManager -> Scheduler, one per data-parallel rank (each scheduler binds its own)
    scheduler_inputs: tuple[str, ...]
    # edge 2: Scheduler -> DetokenizerManager (the detokenizer binds)
    detokenizer_input: str
    # edge 3: DetokenizerManager -> TokenizerManager (the TokenizerManager binds);
    # the schedulers also send their control replies here.
    tokenizer_input: str
    # host:port of the torch.distributed TCPStore where TP groups meet when they may span
    # nodes (node 0 holds it); None: they meet through a file in runtime_dir, on one host.
    tp_store: str | None = None

    @classmethod
    def create(cls, transport, parent_dir: str | None = None, dp_size: int = 1) -> "PortArgs":
        runtime_dir = create_runtime_dir(parent_dir)
        return cls(
            runtime_dir=runtime_dir,
            scheduler_inputs=tuple(transport.endpoint(f"scheduler_input_{rank}", runtime_dir) for rank in range(dp_size)),
            detokenizer_input=transport.endpoint("detokenizer", runtime_dir),
            tokenizer_input=transport.endpoint("tokenizer", runtime_dir),
        )

    @property
    def scheduler_input(self) -> str:
        """Rank 0's input: the only one without data parallelism."""
        return self.scheduler_inputs[0]

    def remove_runtime_dir(self) -> None:
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
