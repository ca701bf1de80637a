"""Every endpoint of one server instance, named before any process starts."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class PortArgs:
    # Private per-instance directory (mode 0700) for ipc sockets and nothing else.
    runtime_dir: str
    # edge 1: TokenizerManager -> Scheduler, one per data-parallel rank (each scheduler binds its own)
    scheduler_inputs: tuple[str, ...]
    # edge 2: Scheduler -> DetokenizerManager (the detokenizer binds)
    detokenizer_input: str
    # edge 3: DetokenizerManager -> TokenizerManager (the TokenizerManager binds);
    # the schedulers also send their control replies here.
    tokenizer_input: str

    @classmethod
    def create(cls, transport, parent_dir: str | None = None, dp_size: int = 1) -> "PortArgs":
        runtime_dir = tempfile.mkdtemp(prefix="tercet-", dir=parent_dir)
        os.chmod(runtime_dir, 0o700)
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
