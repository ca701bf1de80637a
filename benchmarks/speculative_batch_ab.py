"""Speculation on against off at one concurrency, alternated: is the cost model's "off" free?

Starts two servers on the same weights, one with ``--proposer`` (at its default
``speculative.max_batch``, so the cost model decides) and one without, and sends
the copy-heavy and the random workloads of ``speculative_decoding.py`` at
each ``--concurrency`` (c=1: four requests one after another) to each in turn, ``--rounds`` times (A, B, A, B, …: a slow
moment of a busy machine falls on both). Prints each round's tok/s, the median
ratio per workload, and the speculation figures of the run (how many
verifications ran at all). Only one server works at a time.

    python benchmarks/speculative_batch_ab.py [--proposer ngram] [--concurrency 1 32] [--rounds 3]
        [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from pathlib import Path

from speculative_decoding import all_at_once, copy_prompts, random_prompts, speculation_figures
from tercet.testing import RunningServer


# Requests of a concurrency's measure at least: c=1 sends this many one after another.
WAVES = 4


def in_waves(base_url: str, prompts, concurrency: int, output_len: int, ignore_eos: bool) -> float:
    """Output tokens a second over max(concurrency, WAVES) requests sent ``concurrency`` at a time."""
    count = max(concurrency, WAVES)
    tokens, seconds = 0, 0.0
    for start in range(0, count, concurrency):
        wave = prompts[start:min(start + concurrency, count)]
        started = time.perf_counter()
        _, outputs = asyncio.run(all_at_once(base_url, wave, output_len, ignore_eos))
        seconds += time.perf_counter() - started
        tokens += sum(len(output) for output in outputs)
    return tokens / seconds


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposer", default="ngram")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--set", action="append", default=[], help="section.key=value for both servers")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    arguments = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(ensure_dequantized_default_model())
    count = max(*arguments.concurrency, WAVES)
    workloads = {"copy": (copy_prompts(tokenizer, count, seed=1), False),
                 "random": (random_prompts(len(tokenizer), count, 128, seed=2), True)}
    common = ["scheduler.max_running_requests=32", *arguments.set]
    servers = {}
    try:
        for name, settings in (("off", common), ("on", [*common, f"speculative.proposer={arguments.proposer}"])):
            log = arguments.log_dir / f"server-speculative-ab-{name}.log"
            servers[name] = RunningServer(None, log, settings).wait_until_healthy()
            asyncio.run(all_at_once(servers[name].base_url, [list(range(1000, 1032))], 4, True))  # warm-up
        before = speculation_figures(servers["on"].base_url)
        rates = {(c, workload, name): [] for c in arguments.concurrency for workload in workloads for name in servers}
        for _ in range(arguments.rounds):
            for c in arguments.concurrency:
                for workload, (prompts, ignore_eos) in workloads.items():
                    for name, server in servers.items():
                        rate = in_waves(server.base_url, prompts, c, arguments.output_len, ignore_eos)
                        rates[c, workload, name].append(rate)
        after = speculation_figures(servers["on"].base_url)
    finally:
        for server in servers.values():
            server.stop()
    print(f"{arguments.proposer} on (its default max_batch) against off, tok/s per round:")
    for c, workload in itertools.product(arguments.concurrency, workloads):
        off, on = rates[c, workload, "off"], rates[c, workload, "on"]
        ratios = [b / a for a, b in zip(off, on)]
        print(f"  c={c:<3} {workload:7} off {' '.join(f'{r:7.1f}' for r in off)}   on {' '.join(f'{r:7.1f}' for r in on)}   "
              f"on/off median {statistics.median(ratios):.3f} (rounds {' '.join(f'{r:.3f}' for r in ratios)})")
    verified = after.get("verifications", 0) - before.get("verifications", 0)
    drafts = after.get("draft_tokens", 0) - before.get("draft_tokens", 0)
    print(f"  speculation during the timed rounds: {verified} request-steps verified {drafts} drafts")


if __name__ == "__main__":
    main()
