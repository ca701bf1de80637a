"""Speculative decoding on and off, per proposer: copy-heavy and random workloads, c=1 and a c sweep.

Each run starts a real server on the default model (or ``--model``) with its
settings, then sends two workloads through ``/generate``:

- **copy**: a chat prompt gives a paragraph and asks for it back with one word
  changed, so the answer quotes the prompt (what prompt lookup is for);
- **random**: 128 random prompt tokens, 128 output tokens (EOS ignored).

The runs (``--runs``), each compared with its baseline (speculation off on the same weights):

- ``none``: the default model as it ships (its Q4_1 blocks): the baseline of
  ``ngram`` and ``draft_model``;
- ``ngram``: prompt lookup;
- ``none-f32``: the model dense in float32 (``model.quantization = "none"``);
- ``self_quantized-f32``: that float32 model drafted for by its own Q4_1 blocks;
- ``draft_model``: ``--draft-model PATH`` drafting (only with that option).

Figures, per run and workload:

- c=1 effective ITL and the tok/s it makes: requests one at a time; each request's time
  less the time of the same prompt asked for one token (both from a warm prefix cache),
  divided by its output tokens less one;
- c=32 tok/s: ``--requests`` requests at once, output tokens over the wall time (with
  the run's ``speculative.max_batch``, so the cost model decides);
- acceptance: the change of ``/get_server_info``'s speculation figures over the run;
- whether every greedy output equals the baseline's;
- the c sweep (``--sweep``, random workload): tok/s at each concurrency with speculation
  forced on at every batch size (``max_batch`` raised; a second server), against the
  baseline's; the largest c where speculation still wins is where ``speculative.max_batch``
  belongs for that proposer.

All runs happen in one invocation on one machine: read the ratios. ``--quick``
runs a few short requests, to check the script works.

    python benchmarks/speculative_decoding.py [--runs none,ngram,none-f32,self_quantized-f32]
        [--draft-model PATH] [--requests 32] [--sweep 1,2,4,8,16,32] [--output-len 128]
        [--model PATH] [--set section.key=value ...] [--quick]
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


F32 = ["model.quantization=none", "model.dtype=float32"]
# run name -> (its settings, the run whose outputs it must equal and whose speed it is compared with)
RUNS = {
    "none": ([], None),
    "ngram": (["speculative.proposer=ngram"], "none"),
    "none-f32": (F32, None),
    "self_quantized-f32": ([*F32, "speculative.proposer=self_quantized"], "none-f32"),
    "draft_model": (["speculative.proposer=draft_model"], "none"),
}
# max_batch for the sweep: speculation on at every batch size.
ALWAYS = 1 << 20


def settings_of(run: str, arguments, max_batch: int | None = None) -> list[str]:
    settings = [*RUNS[run][0], "scheduler.max_running_requests=32", *arguments.set]
    if run == "draft_model":
        settings.append(f"speculative.draft_model={arguments.draft_model}")
    if max_batch is not None:
        settings.append(f"speculative.max_batch={max_batch}")
    return settings


def started(run: str, settings: list[str], arguments, suffix: str = "") -> RunningServer:
    arguments.log_dir.mkdir(parents=True, exist_ok=True)
    log = arguments.log_dir / f"server-speculative-{run}{suffix}.log"
    server = RunningServer(arguments.model, log, settings).wait_until_healthy()
    asyncio.run(one_at_a_time(server.base_url, [list(range(1000, 1032))], 4, True))  # warm-up
    return server


def measure_workloads(base_url: str, workloads: dict, output_len: int) -> dict:
    results = {}
    for name, (single, batch, ignore_eos) in workloads.items():
        before = speculation_figures(base_url)
        itl, single_outputs = asyncio.run(one_at_a_time(base_url, single, output_len, ignore_eos))
        rate, batch_outputs = asyncio.run(all_at_once(base_url, batch, output_len, ignore_eos))
        figures = acceptance(before, speculation_figures(base_url))
        results[name] = (itl, rate, figures, single_outputs + batch_outputs)
    return results


def sweep(base_url: str, prompts, concurrencies: list[int], output_len: int) -> dict[int, float]:
    """tok/s at each concurrency, the random workload (EOS ignored)."""
    return {c: asyncio.run(all_at_once(base_url, prompts[:c], output_len, True))[0] for c in concurrencies}


def run_one(run: str, workloads: dict, sweep_prompts, arguments) -> tuple[dict, dict[int, float]]:
    """The run's figures by workload, and its c sweep."""
    server = started(run, settings_of(run, arguments), arguments)
    try:
        results = measure_workloads(server.base_url, workloads, arguments.output_len)
        if RUNS[run][1] is None:  # speculation off: max_batch changes nothing
            return results, sweep(server.base_url, sweep_prompts, arguments.sweep, arguments.output_len)
    finally:
        server.stop()
    server = started(run, settings_of(run, arguments, max_batch=ALWAYS), arguments, "-sweep")
    try:
        return results, sweep(server.base_url, sweep_prompts, arguments.sweep, arguments.output_len)
    finally:
        server.stop()


def report(results: dict, sweeps: dict, concurrencies: list[int]) -> None:
    print(f"{'run':19} {'workload':8} {'c=1 ITL ms':>10} {'c=1 tok/s':>9} {'c=32 tok/s':>10}  same output  acceptance")
    for run, by_workload in results.items():
        base = RUNS[run][1]
        for name, (itl, rate, figures, outputs) in by_workload.items():
            same = str(outputs == results[base][name][3]) if base else "-"
            print(f"{run:19} {name:8} {itl * 1000:10.2f} {1 / itl:9.1f} {rate:10.1f}  {same:11}  {figures}")
    print("\nc sweep, random workload, speculation on at every batch size: tok/s (and its ratio to the baseline's);")
    print("max_batch: the largest c up to which speculation wins at every c swept")
    print(f"{'run':19} " + " ".join(f"{'c=' + str(c):>15}" for c in concurrencies) + "  max_batch")
    for run, rates in sweeps.items():
        base = sweeps[RUNS[run][1]] if RUNS[run][1] else None
        cells = [f"{rates[c]:.1f}" + (f" ({rates[c] / base[c]:.2f}x)" if base else "") for c in concurrencies]
        print(f"{run:19} " + " ".join(f"{cell:>15}" for cell in cells) + f"  {winning_batch(rates, base)}")


def winning_batch(rates: dict[int, float], base: dict[int, float] | None) -> str:
    if base is None:
        return "-"
    wins = 0
    for c in sorted(rates):
        if rates[c] < base[c]:
            break
        wins = c
    return str(wins)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=None, help=f"of {', '.join(RUNS)}; default: all (draft_model with "
                                                     "--draft-model only)")
    parser.add_argument("--draft-model", type=Path, default=None, help="the draft_model run's checkpoint")
    parser.add_argument("--requests", type=int, default=32, help="concurrent requests of the c=32 runs")
    parser.add_argument("--single-requests", type=int, default=8, help="requests of the c=1 runs")
    parser.add_argument("--sweep", default="1,2,4,8,16,32", help="concurrencies of the c sweep")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--model", type=Path, default=None, help="default: the built-in default model")
    parser.add_argument("--set", action="append", default=[], help="section.key=value for every server")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--quick", action="store_true", help="a few short requests: check the script works")
    arguments = parser.parse_args()
    if arguments.runs is None:
        arguments.runs = ",".join(run for run in RUNS if run != "draft_model" or arguments.draft_model)
    arguments.runs = arguments.runs.split(",")
    unknown = [run for run in arguments.runs if run not in RUNS]
    if unknown or ("draft_model" in arguments.runs and arguments.draft_model is None):
        parser.error(f"unknown runs {unknown}" if unknown else "the draft_model run needs --draft-model")
    # A run's baseline runs too, first.
    arguments.runs = list(dict.fromkeys(base for run in arguments.runs for base in (RUNS[run][1], run) if base))
    arguments.sweep = [int(c) for c in arguments.sweep.split(",")]
    if arguments.quick:
        arguments.requests, arguments.single_requests, arguments.output_len, arguments.sweep = 2, 1, 12, [1, 2]
    return arguments


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    arguments = parse_arguments()
    tokenizer = AutoTokenizer.from_pretrained(arguments.model or ensure_dequantized_default_model())
    count = arguments.single_requests + arguments.requests
    copy, noise = copy_prompts(tokenizer, count, seed=1), random_prompts(len(tokenizer), count, 128, seed=2)
    split = arguments.single_requests
    workloads = {"copy": (copy[:split], copy[split:], False), "random": (noise[:split], noise[split:], True)}
    sweep_prompts = random_prompts(len(tokenizer), max(arguments.sweep), 128, seed=3)
    results, sweeps = {}, {}
    for run in arguments.runs:
        results[run], sweeps[run] = run_one(run, workloads, sweep_prompts, arguments)
    report(results, sweeps, arguments.sweep)


if __name__ == "__main__":
    main()
