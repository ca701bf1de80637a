"""Multi-turn conversations over a pool too small for them: the prefix cache with a tier below the pool, or not.

    python3 benchmarks/kv_storage_tiers.py [--tier none --tier host --tier file]
        [--conversations 64] [--turns 8] [--system-tokens 2048] [--turn-tokens 256] [--output-tokens 16]
        [--concurrency 8] [--pool-share 0.25] [--model DIR] [--set SECTION.KEY=VALUE ...]
        [--skip-restart] [--json-out /tmp/kv_storage_tiers.json] [--quick]

**The workload.** ``--conversations`` conversations, each with a system prompt of its own of
``--system-tokens`` tokens, go through ``--turns`` turns; each turn's prompt is the previous
turn's plus ``--turn-tokens`` new tokens (the reply and the next question, as token ids),
asking for ``--output-tokens`` tokens (streamed ``/v1/completions``, greedy, ``ignore_eos``).
A turn is sent for every conversation (``--concurrency`` at a time) before the next turn
starts. The pool (``cache.max_total_tokens``) holds ``--pool-share`` of the live prefixes at
the end (every conversation's last prompt), so the pool alone loses most conversations
between their turns.

**Tiers.** For each ``--tier`` (``none``, ``host``, ``file`` by default) a server is started
here, one at a time, with ``cache.storage`` set to it (the host tier and the file tier get
budgets that hold every live prefix; the file tier a fresh directory) and sent the same
workload. Reported per tier: TTFT p50/p99, the prompt tokens computed (admitted minus those
found cached, from ``/metrics``), the tier's lookups, hits and pages read; then each against
``none``.

**A restart.** With the file tier, a server runs the first half of the turns, stops
(gracefully: the pool's cached prefixes are written down) and a new server on the same
directory runs the next turn: the prompt tokens it computed, against the new tokens that
turn added (the least any server could compute) and against the same with ``none``.

The prompt tokens computed, hit rates and page counts do not depend on timing and hold on
a busy machine; the TTFTs do not. ``--quick`` runs it with small sizes, on the tiny test
model when ``--model`` is not given: it only checks that the script runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import tempfile
import time
from pathlib import Path

import httpx

from tercet.bench.arrivals import at_fixed_concurrency
from tercet.bench.serving import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, judged
from tercet.bench.streaming_client import stream_completion
from tercet.bench.summary import LatencyStats
from tercet.bench.script_arguments import add_served_script_arguments, with_quick_sizes
from tercet.testing.tiny_model import write_tiny_default_llama

TIERS = ("none", "host", "file")
COUNTERS = ("prefix_cache_queries_total", "prefix_cache_hits_total", "kv_storage_lookups_total",
            "kv_storage_hits_total", "kv_storage_pages_read_total", "kv_storage_pages_written_total")


# -- the workload ---------------------------------------------------------------


def conversations(arguments, vocabulary_size: int) -> list[list[list[int]]]:
    """Each conversation's prompt at each turn, as token ids (random ordinary tokens, seeded)."""
    rng = random.Random(f"kv-storage-tiers:{arguments.seed}")
    first_id, last_id = 100, min(vocabulary_size, 40_000) - 1

    def tokens(count: int) -> list[int]:
        return [rng.randint(first_id, last_id) for _ in range(count)]

    turns_of = []
    for _ in range(arguments.conversations):
        prompt = tokens(arguments.system_tokens)
        turns = []
        for _ in range(arguments.turns):
            prompt = prompt + tokens(arguments.turn_tokens)
            turns.append(prompt)
        turns_of.append(turns)
    return turns_of


def pool_tokens(arguments) -> int:
    live = arguments.conversations * (arguments.system_tokens + arguments.turns * arguments.turn_tokens)
    one_request = arguments.system_tokens + arguments.turns * arguments.turn_tokens + arguments.output_tokens
    # At least what the running requests need at once, so nothing is refused for being too long.
    return max(int(live * arguments.pool_share), one_request * arguments.concurrency)


# -- one server ------------------------------------------------------------------


def counters(base_url: str) -> dict[str, float]:
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in httpx.get(base_url + "/metrics", timeout=60).text.splitlines():
        match = re.match(r"tercet:(\w+)\{.*\} (\S+)$", line)
        if match and match.group(1) in totals:
            totals[match.group(1)] += float(match.group(2))
    return totals


async def send_turn(base_url: str, prompts: list[list[int]], arguments) -> list:
    limits = httpx.Limits(max_connections=arguments.concurrency, max_keepalive_connections=arguments.concurrency)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def send(prompt: list[int]):
            payload = {"model": "bench", "prompt": prompt, "max_tokens": arguments.output_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
            outcome = await stream_completion(client, base_url + "/v1/completions", payload, {}, len(prompt))
            return judged(outcome, arguments.output_tokens)

        return await at_fixed_concurrency(send, prompts, arguments.concurrency)


def start(tier: str, directory: Path, arguments, log_name: str):
    from tercet.testing import RunningServer

    settings = ["model.served_model_name=bench", f"cache.max_total_tokens={pool_tokens(arguments)}",
                f"scheduler.max_running_requests={arguments.concurrency}", f"cache.storage={tier}",
                f"cache.file_dir={directory}", "cache.host_bytes=64GiB", "cache.file_bytes=64GiB", *arguments.set]
    return RunningServer(arguments.model, arguments.log_dir / f"server-kv-storage-{log_name}.log",
                         settings).wait_until_healthy(600)


def run_turns(server, turns_of, turn_numbers, arguments) -> tuple[list, dict]:
    """The outcomes of the given turns of every conversation, and the counters they moved."""
    before = counters(server.base_url)
    outcomes = []
    for turn in turn_numbers:
        outcomes += asyncio.run(send_turn(server.base_url, [turns[turn] for turns in turns_of], arguments))
    time.sleep(1.0)  # the ranks send their figures between steps: let the last ones arrive
    after = counters(server.base_url)
    return outcomes, {name: after[name] - before[name] for name in COUNTERS}


def figures(tier: str, outcomes: list, moved: dict) -> dict:
    ttfts = [outcome.ttft for outcome in outcomes if outcome.is_success and outcome.ttft is not None]
    ttft = LatencyStats.of_seconds(ttfts)
    lookups = moved["kv_storage_lookups_total"]
    return {
        "tier": tier,
        "ttft_p50_ms": ttft.p50 if ttft else None,
        "ttft_p99_ms": ttft.p99 if ttft else None,
        "prompt_tokens": int(moved["prefix_cache_queries_total"]),
        "prompt_tokens_computed": int(moved["prefix_cache_queries_total"] - moved["prefix_cache_hits_total"]),
        "tier_lookups": int(lookups),
        "tier_hit_rate": moved["kv_storage_hits_total"] / lookups if lookups else None,
        "tier_pages_read": int(moved["kv_storage_pages_read_total"]),
        "tier_pages_written": int(moved["kv_storage_pages_written_total"]),
        "failed": sum(not outcome.is_success for outcome in outcomes),
        "errors": sorted({outcome.error for outcome in outcomes if not outcome.is_success})[:3],
    }


def serve_with(tier: str, turns_of, arguments) -> dict:
    with tempfile.TemporaryDirectory(prefix="kv-storage-bench-") as directory:
        server = start(tier, Path(directory), arguments, tier)
        try:
            outcomes, moved = run_turns(server, turns_of, range(arguments.turns), arguments)
        finally:
            server.stop()
    return figures(tier, outcomes, moved)


def restart_with(tier: str, turns_of, arguments) -> dict:
    """The turn after a restart, half-way through the conversations: what the new server computed."""
    half = max(arguments.turns // 2, 1)
    with tempfile.TemporaryDirectory(prefix="kv-storage-bench-restart-") as directory:
        before = start(tier, Path(directory), arguments, f"{tier}-before-restart")
        try:
            run_turns(before, turns_of, range(half), arguments)
        finally:
            before.stop()
        after = start(tier, Path(directory), arguments, f"{tier}-after-restart")
        try:
            outcomes, moved = run_turns(after, turns_of, [half], arguments)
        finally:
            after.stop()
    result = figures(tier, outcomes, moved)
    result["new_tokens"] = arguments.conversations * arguments.turn_tokens
    return result


# -- the report ---------------------------------------------------------------------


def ratio(value, base) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "n/a"


def print_results(results: list[dict], title: str) -> None:
    print(title)
    print(f"{'tier':6} {'TTFT p50':>10} {'TTFT p99':>10} {'prompt tok':>11} {'computed':>10} {'lookups':>8} "
          f"{'hit rate':>9} {'pages read':>11}")
    for result in results:
        hit_rate = result["tier_hit_rate"]
        print(f"{result['tier']:6} {result['ttft_p50_ms'] or 0:8.1f}ms {result['ttft_p99_ms'] or 0:8.1f}ms "
              f"{result['prompt_tokens']:11d} {result['prompt_tokens_computed']:10d} {result['tier_lookups']:8d} "
              f"{hit_rate if hit_rate is not None else float('nan'):9.3f} {result['tier_pages_read']:11d}"
              + (f"  new tokens {result['new_tokens']}" if "new_tokens" in result else "")
              + (f"  FAILED {result['failed']}: {result['errors']}" if result["failed"] else ""))
    base = next((result for result in results if result["tier"] == "none"), None)
    for result in results:
        if base is not None and result is not base:
            print(f"  {result['tier']} / none: TTFT p50 {ratio(result['ttft_p50_ms'], base['ttft_p50_ms'])}, "
                  f"TTFT p99 {ratio(result['ttft_p99_ms'], base['ttft_p99_ms'])}, prompt tokens computed "
                  f"{ratio(result['prompt_tokens_computed'], base['prompt_tokens_computed'])}")


# -- the command line -------------------------------------------------------------


# What --quick runs: only enough to check that the script runs.
QUICK_SIZES = {"conversations": 8, "turns": 4, "system_tokens": 128, "turn_tokens": 32, "output_tokens": 4,
               "concurrency": 2}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", action="append", choices=TIERS, help=f"tiers to run (default: {', '.join(TIERS)})")
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--system-tokens", type=int, default=2048)
    parser.add_argument("--turn-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pool-share", type=float, default=0.25,
                        help="the share of the live prefixes the pool holds (cache.max_total_tokens)")
    parser.add_argument("--skip-restart", action="store_true", help="the tiers alone, no restart scenario")
    add_served_script_arguments(parser)
    arguments = parser.parse_args()
    arguments.tier = arguments.tier or list(TIERS)
    return with_quick_sizes(arguments, QUICK_SIZES, write_tiny_default_llama)


def main() -> None:
    from tercet.bench.workload import load_tokenizer

    arguments = parse_arguments()
    turns_of = conversations(arguments, len(load_tokenizer(arguments.model)))
    results: dict = {"config": {key: str(value) for key, value in vars(arguments).items()},
                     "pool_tokens": pool_tokens(arguments)}
    print(f"pool: {results['pool_tokens']} tokens for {arguments.conversations} conversations of up to "
          f"{arguments.system_tokens + arguments.turns * arguments.turn_tokens} tokens")
    results["tiers"] = [serve_with(tier, turns_of, arguments) for tier in arguments.tier]
    print_results(results["tiers"], "every turn of every conversation:")
    if not arguments.skip_restart:
        results["restart"] = [restart_with(tier, turns_of, arguments) for tier in ("none", "file")]
        print_results(results["restart"], "the first turn after a restart:")
    if arguments.json_out:
        arguments.json_out.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
