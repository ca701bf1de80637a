"""Load balancers on a multi-tenant workload at dp=2, and the router's own cost per request.

    python3 benchmarks/cache_aware_routing.py [--balancer round_robin --balancer cache_aware ...]
        [--tenants 16] [--system-tokens 1024] [--requests 512] [--new-tokens 64] [--output-tokens 64]
        [--concurrency 16] [--router-prefixes 10000] [--json-out /tmp/cache_aware_routing.json] [--quick]

**Serving.** For each balancer (``round_robin``, ``shortest_queue``, ``cache_aware`` by
default) a server of ``--dp-size`` ranks is started here, one at a time, and sent the same
workload: ``--tenants`` tenants, each with its own system prompt of ``--system-tokens``
tokens, and ``--requests`` requests, each a tenant's system prompt (the tenant drawn at
random, seeded) plus ``--new-tokens`` fresh tokens, asking for ``--output-tokens`` tokens
(streamed ``/v1/completions``, greedy, ``ignore_eos``) at concurrency ``--concurrency``.
Reported per balancer: the prefix-cache hit rate (prompt tokens the ranks found cached over
prompt tokens admitted, from ``/metrics``), TTFT p50/p99, output tokens/s, and the requests
each rank finished (from ``/metrics``); then each figure against the first balancer's. The
hit rates and request counts do not depend on timing and hold on a busy machine; the TTFTs
and throughputs do not.

**The router.** Each balancer behind a real ``DataParallelRouter`` (senders that drop what
they are given), with ``--router-prefixes`` prompts routed first (``cache_aware``'s trees
then hold that many cached prefixes), then ``--router-requests`` prompts that each extend
one of them, timed: microseconds per routed prompt, with the trees' sizes.

``--quick`` runs every part with small sizes, on the tiny test model when ``--model`` is not
given: it only checks that the script runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time

import httpx

from tercet.bench.arrivals import at_fixed_concurrency
from tercet.bench.serving import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, judged
from tercet.bench.streaming_client import stream_completion
from tercet.bench.summary import summarize
from tercet.bench.workload import BenchRequest, load_tokenizer, synthetic_requests
from tercet.bench.script_arguments import add_served_script_arguments, with_quick_sizes
from tercet.testing.tiny_model import write_tiny_default_llama

BALANCERS = ("round_robin", "shortest_queue", "cache_aware")


# -- the workload ---------------------------------------------------------------


def tenant_requests(tokenizer, arguments) -> list[BenchRequest]:
    """Each request: a random tenant's system prompt, then fresh tokens of its own."""
    systems = synthetic_requests(tokenizer, arguments.tenants, arguments.system_tokens, 1, arguments.seed, "system")
    questions = synthetic_requests(tokenizer, arguments.requests, arguments.new_tokens, arguments.output_tokens,
                                   arguments.seed, "question")
    rng = random.Random(f"tenants:{arguments.seed}")
    requests = []
    for question in questions:
        system = rng.choice(systems)
        prompt = system.prompt + question.prompt
        requests.append(BenchRequest(prompt, len(tokenizer.encode(prompt)), arguments.output_tokens))
    return requests


# -- one server per balancer -------------------------------------------------------


def per_rank(base_url: str, name: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in httpx.get(base_url + "/metrics", timeout=60).text.splitlines():
        match = re.match(name + r'\{.*dp_rank="(\d+)".*\} (\S+)', line)
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0.0) + float(match.group(2))
    return counts


def rank_counts(base_url: str) -> dict[str, dict[str, float]]:
    return {name: per_rank(base_url, f"tercet:{name}")
            for name in ("prefix_cache_hits_total", "prefix_cache_queries_total", "request_success_total")}


def counts_since(before: dict, after: dict) -> dict[str, dict[str, float]]:
    return {name: {rank: value - before[name].get(rank, 0.0) for rank, value in ranks.items()}
            for name, ranks in after.items()}


async def send_all(base_url: str, model: str, requests: list[BenchRequest], concurrency: int):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def send(request: BenchRequest):
            payload = {"model": model, "prompt": request.prompt, "max_tokens": request.output_len, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
            outcome = await stream_completion(client, base_url + "/v1/completions", payload, {}, request.prompt_len)
            return judged(outcome, request.output_len)

        started = time.perf_counter()
        outcomes = await at_fixed_concurrency(send, requests, concurrency)
        return outcomes, time.perf_counter() - started


def serve_with(balancer: str, requests, warmups, arguments) -> dict:
    from tercet.testing import RunningServer

    settings = [f"scheduler.dp_size={arguments.dp_size}", f"scheduler.load_balance={balancer}",
                "model.served_model_name=bench", *arguments.set]
    log = arguments.log_dir / f"server-cache-aware-routing-{balancer}.log"
    server = RunningServer(arguments.model, log, settings).wait_until_healthy(600)
    try:
        # Warm-up prompts share nothing with the workload: first-call costs only.
        asyncio.run(send_all(server.base_url, "bench", warmups, arguments.concurrency))
        before = rank_counts(server.base_url)
        outcomes, duration = asyncio.run(send_all(server.base_url, "bench", requests, arguments.concurrency))
        # The ranks send their figures between steps: let the last ones arrive.
        time.sleep(1.0)
        counts = counts_since(before, rank_counts(server.base_url))
    finally:
        server.stop()
    summary = summarize(outcomes, duration)
    hits, queries = (sum(counts[name].values()) for name in ("prefix_cache_hits_total", "prefix_cache_queries_total"))
    return {
        "balancer": balancer,
        "hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_ms": summary.ttft.p50 if summary.ttft else None,
        "ttft_p99_ms": summary.ttft.p99 if summary.ttft else None,
        "output_tokens_per_s": summary.output_tokens_per_s,
        "requests_per_rank": {rank: int(count) for rank, count in sorted(counts["request_success_total"].items())},
        "failed": summary.failed,
        "errors": summary.errors,
    }


def print_serving(results: list[dict]) -> None:
    print(f"{'balancer':16} {'hit rate':>9} {'TTFT p50':>10} {'TTFT p99':>10} {'out tok/s':>10}  requests per rank")
    for result in results:
        p50, p99 = result["ttft_p50_ms"] or 0.0, result["ttft_p99_ms"] or 0.0
        print(f"{result['balancer']:16} {result['hit_rate']:9.3f} {p50:8.1f}ms {p99:8.1f}ms "
              f"{result['output_tokens_per_s']:10.1f}  {result['requests_per_rank']}"
              + (f"  FAILED {result['failed']}: {result['errors']}" if result["failed"] else ""))
    base = results[0]
    for result in results[1:]:
        counts = list(result["requests_per_rank"].values()) or [0]
        print(f"{result['balancer']} / {base['balancer']}: hit rate {ratio(result['hit_rate'], base['hit_rate'])}, "
              f"TTFT p50 {ratio(result['ttft_p50_ms'], base['ttft_p50_ms'])}, "
              f"busiest / idlest rank {ratio(max(counts), min(counts))}")


def ratio(value, base) -> str:
    return f"{value / base:.2f}x" if value and base else "n/a"


# -- the router's cost ----------------------------------------------------------


class DroppingSender:
    def send(self, message) -> None:
        pass


def router_cost(balancer: str, arguments) -> dict:
    """Microseconds per prompt through a DataParallelRouter with ``balancer``, after routing the cached prefixes."""
    from tercet.config import TercetConfig
    from tercet.frontend.data_parallel_router import DataParallelRouter
    from tercet.ipc.messages import SamplingParams, TokenizedGenerateReq
    from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager

    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).load_balancers
    # Trees large enough to keep every prefix: the cost measured is that of a full tree.
    tree_tokens = arguments.router_prefixes * arguments.router_prompt_tokens
    config = TercetConfig(plugins={"cache_aware": {"tree_tokens_per_rank": tree_tokens}})
    router = DataParallelRouter([DroppingSender() for _ in range(arguments.dp_size)],
                                registry.get(balancer)(config, arguments.dp_size))
    rng = random.Random(f"router:{arguments.seed}")
    params = SamplingParams(max_new_tokens=1)
    # Drawn from one list of ids, so the prompts share their int objects: 10k prompts of 1k tokens in 100 MB.
    vocabulary = list(range(49152))
    prefixes = [rng.choices(vocabulary, k=arguments.router_prompt_tokens) for _ in range(arguments.router_prefixes)]
    for index, prefix in enumerate(prefixes):
        router.send(TokenizedGenerateReq(f"p{index}", prefix, params), [f"p{index}"])
        router.forget(f"p{index}")
    messages = [TokenizedGenerateReq(f"r{index}", rng.choice(prefixes) + rng.choices(vocabulary, k=64), params)
                for index in range(arguments.router_requests)]
    started = time.perf_counter()
    for message in messages:
        router.send(message, [message.rid])
        router.forget(message.rid)
    elapsed = time.perf_counter() - started
    trees = getattr(router.balancer, "trees", [])
    return {"balancer": balancer, "us_per_request": elapsed / len(messages) * 1e6,
            "cached_prefixes": len(prefixes), "tree_tokens": [tree.num_tokens for tree in trees]}


# -- the command line -------------------------------------------------------------


# What --quick runs: only enough to check that the script runs.
QUICK_SIZES = {"tenants": 4, "system_tokens": 64, "requests": 24, "new_tokens": 8, "output_tokens": 4,
               "concurrency": 4, "warmup": 2, "router_prefixes": 200, "router_prompt_tokens": 256,
               "router_requests": 200}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--balancer", action="append", help=f"load balancers to run (default: {', '.join(BALANCERS)})")
    parser.add_argument("--dp-size", type=int, default=2)
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--system-tokens", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--router-prefixes", type=int, default=10_000)
    parser.add_argument("--router-prompt-tokens", type=int, default=1088)
    parser.add_argument("--router-requests", type=int, default=10_000)
    parser.add_argument("--skip-serving", action="store_true", help="the router's cost alone")
    add_served_script_arguments(parser)
    arguments = parser.parse_args()
    arguments.balancer = arguments.balancer or list(BALANCERS)
    return with_quick_sizes(arguments, QUICK_SIZES, write_tiny_default_llama)


def main() -> None:
    arguments = parse_arguments()
    results: dict = {"config": {key: str(value) for key, value in vars(arguments).items()}}
    if not arguments.skip_serving:
        tokenizer = load_tokenizer(arguments.model)
        requests = tenant_requests(tokenizer, arguments)
        warmups = synthetic_requests(tokenizer, arguments.warmup, arguments.new_tokens, arguments.output_tokens,
                                     arguments.seed, "warmup")
        results["serving"] = [serve_with(balancer, requests, warmups, arguments) for balancer in arguments.balancer]
        print_serving(results["serving"])
    results["router"] = [router_cost(balancer, arguments) for balancer in arguments.balancer]
    for cost in results["router"]:
        print(f"router {cost['balancer']:16} {cost['us_per_request']:8.1f} us per request "
              f"({cost['cached_prefixes']} cached prefixes; tree tokens per rank {cost['tree_tokens']})")
    if arguments.json_out:
        arguments.json_out.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
