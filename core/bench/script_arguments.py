"""The arguments every served benchmark script under ``benchmarks/`` shares, and its ``--quick`` sizes.

Such a script starts its own servers on a model, sends a workload and reports
figures: it takes the model, a seed, more server settings, where the servers'
logs and the figures go, and ``--quick``, which swaps in small sizes (and the
tiny test model when no ``--model`` is given) only to check that it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def add_served_script_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (default: the built-in model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="more server settings, as tercet serve --set takes them")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere: checks that the script runs")


def with_quick_sizes(arguments: argparse.Namespace, sizes: dict,
                     tiny_model: Callable[[], Path]) -> argparse.Namespace:
    """``arguments`` with ``sizes`` in place under ``--quick``, and the model ``tiny_model()`` writes when none
    was given (the script passes tercet.testing's writer: this package sits beside tercet.testing, not above)."""
    if not arguments.quick:
        return arguments
    model = arguments.model if arguments.model is not None else str(tiny_model())
    return argparse.Namespace(**{**vars(arguments), **sizes, "model": model})
