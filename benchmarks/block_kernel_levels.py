"""The block kernel at each x86 level this CPU runs: the default model's decoder projections and LM head.

Each level runs in a process of its own (``TERCET_CPU_ISA``: a library loaded
keeps its level), the levels in turn, ``--processes`` times; each cell is the
best over the processes of the best of ``--trials`` passes. The layers are
those of ``benchmarks/linear_kernels.py`` (30 decoder layers of Q4_1
projections, the Q8_0 LM head), fed bfloat16 rows. Prints one row per batch
size, with each level's time over the first level's. Run on an idle machine:

    python benchmarks/block_kernel_levels.py --levels avx2 avx512vnni avx512
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def measure(batch_sizes: list[int], trials: int) -> dict[int, tuple[float, float]]:
    """In this process, at its level: {rows: (decoder ms, head ms)}."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from linear_kernels import decoder_layers, head, milliseconds

    from tercet.model.linear_method import LinearTarget
    from tercet.plugins.linear_layers.methods import BlockLinearMethod

    target = LinearTarget("bench", torch.bfloat16, torch.device("cpu"), native_kernels=True)
    decoder, lm_head = decoder_layers(BlockLinearMethod("Q4_1"), target), head(BlockLinearMethod("Q8_0"), target)
    return {rows: (milliseconds(decoder, rows, trials), milliseconds([lm_head], rows, trials)) for rows in batch_sizes}


def in_process_at(level: str, batch_sizes: list[int], trials: int) -> dict[int, tuple[float, float]]:
    command = [sys.executable, __file__, "--measure", "--batch-sizes", *map(str, batch_sizes), "--trials", str(trials)]
    output = subprocess.run(command, env={**os.environ, "TERCET_CPU_ISA": level}, check=True, capture_output=True,
                            text=True).stdout
    return {int(rows): tuple(times) for rows, times in json.loads(output.splitlines()[-1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["avx2", "avx512vnni", "avx512"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.measure:
        print(json.dumps(measure(arguments.batch_sizes, arguments.trials)))
        return
    best: dict[str, dict[int, list[float]]] = {level: {} for level in arguments.levels}
    for _ in range(arguments.processes):
        for level in arguments.levels:
            for rows, times in in_process_at(level, arguments.batch_sizes, arguments.trials).items():
                kept = best[level].setdefault(rows, [float("inf"), float("inf")])
                best[level][rows] = [min(kept[0], times[0]), min(kept[1], times[1])]
    first = arguments.levels[0]
    print("| rows | " + " | ".join(f"{level} decoder ms | {level} head ms" for level in arguments.levels) + " |")
    print("|---" * (1 + 2 * len(arguments.levels)) + "|")
    for rows in arguments.batch_sizes:
        cells = []
        for level in arguments.levels:
            (decoder, head), (base_decoder, base_head) = best[level][rows], best[first][rows]
            cells += [f"{decoder:.2f} ({decoder / base_decoder:.2f}×)", f"{head:.2f} ({head / base_head:.2f}×)"]
        print(f"| {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
