"""The arguments served benchmark scripts share: their defaults, and what --quick swaps in."""

from __future__ import annotations

import argparse
from pathlib import Path

from tercet.bench.script_arguments import add_served_script_arguments, with_quick_sizes


def parsed(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=512)
    add_served_script_arguments(parser)
    return parser.parse_args(argv)


def no_tiny_model() -> Path:
    raise AssertionError("a measuring run must not write the tiny model")


def test_a_measuring_run_keeps_its_sizes_and_settings():
    arguments = parsed(["--set", "cache.kv_dtype=int8", "--set", "scheduler.dp_size=2", "--json-out", "/tmp/x.json"])
    assert with_quick_sizes(arguments, {"requests": 8}, no_tiny_model) is arguments
    assert (arguments.requests, arguments.model, arguments.seed) == (512, None, 0)
    assert arguments.set == ["cache.kv_dtype=int8", "scheduler.dp_size=2"]
    assert (arguments.json_out, arguments.log_dir) == (Path("/tmp/x.json"), Path("/tmp"))


def test_quick_swaps_in_small_sizes_and_the_tiny_model_unless_a_model_is_given(tmp_path):
    quick = with_quick_sizes(parsed(["--quick"]), {"requests": 8}, lambda: tmp_path)
    assert (quick.requests, quick.model) == (8, str(tmp_path))
    chosen = with_quick_sizes(parsed(["--quick", "--model", "/models/m"]), {"requests": 8}, no_tiny_model)
    assert (chosen.requests, chosen.model) == (8, "/models/m")
