"""Speculative decoding on and off: copy-heavy and random workloads, c=1 ITL and c=32 tok/s.

For each proposer (``none`` is speculation off) it starts a real server on the
default model (or ``--model``), then runs two workloads through ``/generate``:

- **copy**: a chat prompt gives a paragraph and asks for it back with one word
  changed, so the answer quotes the prompt (what prompt lookup is for);
- **random**: 128 random prompt tokens, 128 output tokens (EOS ignored).

Figures, per proposer and workload:

- c=1 effective ITL: requests one at a time; each request's time less the time of
  the same prompt asked for one token (both from a warm prefix cache), divided by
  its output tokens less one;
- c=32 tok/s: ``--requests`` requests at once, output tokens over the wall time;
- acceptance: the change of ``/get_server_info``'s speculation figures over the run;
- whether every greedy output equals speculation off's.

Both runs happen in one invocation on one machine: read the ratios. ``--quick``
runs a few short requests, to check the script works.

    python benchmarks/speculative_decoding.py [--proposers none,ngram] [--requests 32]
        [--output-len 128] [--model PATH] [--set section.key=value ...] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

import httpx

from tercet.testing import RunningServer

WORDS = ("the river carried small boats past the old mill while farmers counted sheep near a quiet "
         "stone bridge and children read letters from distant cities under tall green trees").split()


def copy_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    """Chat prompts whose answer quotes a paragraph of the prompt, one word changed."""
    generator = random.Random(seed)
    prompts = []
    for _ in range(count):
        paragraph = " ".join(generator.choice(WORDS) for _ in range(70))
        old, new = generator.choice(WORDS), generator.choice(["lantern", "copper", "meadow", "violin"])
        message = (f"Rewrite the text below exactly as it is, but write \"{new}\" instead of every \"{old}\". "
                   f"Answer with the rewritten text only.\n\n{paragraph}")
        text = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                             tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


def random_prompts(vocab_size: int, count: int, length: int, seed: int) -> list[list[int]]:
    generator = random.Random(seed)
    return [[generator.randrange(100, vocab_size) for _ in range(length)] for _ in range(count)]


async def generate(client: httpx.AsyncClient, prompt: list[int], max_new_tokens: int, ignore_eos: bool) -> dict:
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": ignore_eos}
    response = await client.post("/generate", json={"input_ids": prompt, "sampling_params": params})
    response.raise_for_status()
    return response.json()


async def one_at_a_time(base_url: str, prompts, output_len: int, ignore_eos: bool) -> tuple[float, list]:
    """c=1 effective ITL (seconds) and the outputs."""
    gaps, outputs = [], []
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        for prompt in prompts:
            # The prompt once untimed, so that both timed requests find it in the prefix cache.
            await generate(client, prompt, 1, ignore_eos)
            started = time.perf_counter()
            await generate(client, prompt, 1, ignore_eos)
            first = time.perf_counter() - started
            started = time.perf_counter()
            answer = await generate(client, prompt, output_len, ignore_eos)
            elapsed = time.perf_counter() - started
            outputs.append(answer["output_ids"])
            if len(answer["output_ids"]) > 1:
                gaps.append((elapsed - first) / (len(answer["output_ids"]) - 1))
    return (sum(gaps) / len(gaps) if gaps else float("nan")), outputs


async def all_at_once(base_url: str, prompts, output_len: int, ignore_eos: bool) -> tuple[float, list]:
    """c=len(prompts) output tokens a second, and the outputs."""
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(*[generate(client, prompt, output_len, ignore_eos) for prompt in prompts])
        elapsed = time.perf_counter() - started
    outputs = [answer["output_ids"] for answer in answers]
    return sum(len(output) for output in outputs) / elapsed, outputs


def speculation_figures(base_url: str) -> dict:
    ranks = httpx.get(base_url + "/get_server_info", timeout=60).json()["ranks"]
    return ranks[0].get("speculation") or {}


def acceptance(before: dict, after: dict) -> str:
    if not after:
        return "-"
    drafts = after["draft_tokens"] - before.get("draft_tokens", 0)
    accepted = after["accepted_tokens"] - before.get("accepted_tokens", 0)
    verifications = after["verifications"] - before.get("verifications", 0)
    if not drafts:
        return "no drafts"
    return f"{accepted / drafts:.2f} of {drafts} drafts, {accepted / max(verifications, 1):.2f} a verification"


def run_proposer(proposer: str, workloads: dict, arguments) -> dict:
    settings = [f"speculative.proposer={proposer}", "scheduler.max_running_requests=32", *arguments.set]
    log = arguments.log_dir / f"server-speculative-{proposer}.log"
    server = RunningServer(arguments.model, log, settings).wait_until_healthy()
    results = {}
    try:
        asyncio.run(one_at_a_time(server.base_url, [list(range(1000, 1032))], 4, True))  # warm-up
        for name, (single, batch, ignore_eos) in workloads.items():
            before = speculation_figures(server.base_url)
            itl, single_outputs = asyncio.run(one_at_a_time(server.base_url, single, arguments.output_len, ignore_eos))
            rate, batch_outputs = asyncio.run(all_at_once(server.base_url, batch, arguments.output_len, ignore_eos))
            figures = acceptance(before, speculation_figures(server.base_url))
            results[name] = (itl, rate, figures, single_outputs + batch_outputs)
    finally:
        server.stop()
    return results


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposers", default="none,ngram")
    parser.add_argument("--requests", type=int, default=32, help="concurrent requests of the c=32 runs")
    parser.add_argument("--single-requests", type=int, default=8, help="requests of the c=1 runs")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--model", type=Path, default=None, help="default: the built-in default model")
    parser.add_argument("--set", action="append", default=[], help="section.key=value for every server")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--quick", action="store_true", help="a few short requests: check the script works")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.requests, arguments.single_requests, arguments.output_len = 2, 1, 12

    tokenizer = AutoTokenizer.from_pretrained(arguments.model or ensure_dequantized_default_model())
    count = arguments.single_requests + arguments.requests
    copy, noise = copy_prompts(tokenizer, count, seed=1), random_prompts(len(tokenizer), count, 128, seed=2)
    split = arguments.single_requests
    workloads = {"copy": (copy[:split], copy[split:], False), "random": (noise[:split], noise[split:], True)}
    results = {proposer: run_proposer(proposer, workloads, arguments) for proposer in arguments.proposers.split(",")}
    baseline = next(iter(results.values()))
    print(f"{'proposer':10} {'workload':8} {'c=1 ITL ms':>10} {'c=32 tok/s':>10}  same output  acceptance")
    for proposer, by_workload in results.items():
        for name, (itl, rate, figures, outputs) in by_workload.items():
            same = outputs == baseline[name][3]
            print(f"{proposer:10} {name:8} {itl * 1000:10.2f} {rate:10.1f}  {str(same):11}  {figures}")


if __name__ == "__main__":
    main()
