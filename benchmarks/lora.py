"""Multi-LoRA serving: c=32 decode throughput with 4 adapters mixed against the base alone, and memory per adapter.

It makes ``--adapters`` PEFT adapters of the default model (or ``--model``;
random, non-zero A and B of rank ``--rank`` on every projection, made by PEFT
itself), starts one real server with them loaded, and runs the same workload
through ``/generate``, base then mixed, ``--rounds`` times: ``--requests``
random prompts of ``--input-len`` tokens at once, ``--output-len`` tokens each
(EOS ignored),

- **base**: no request names an adapter;
- **mixed**: request i runs with adapter i mod ``--adapters``.

It prints each round's output tokens a second and ratio, and the median
ratio (the issue's target: mixed at least 0.8 of base; alternating rounds
keep a busy machine's load from landing on one side only), then the memory an adapter costs: the
bytes of the tensors the server holds for it (as ``/load_lora_adapter``
reports them), and the growth of the scheduler's proportional set size (PSS)
when one more adapter is loaded at run time. The PSS growth is only a rough
check: the allocator may reuse freed memory or keep more than it was asked for.
``--quick`` runs a few short requests, to check the script works.

    python benchmarks/lora.py [--adapters 4] [--rank 16] [--requests 32] [--input-len 128]
        [--output-len 128] [--rounds 3] [--model PATH] [--set section.key=value ...] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tercet.testing import RunningServer
from tercet.testing.lora_adapters import write_peft_adapter


async def generate(client: httpx.AsyncClient, prompt: list[int], output_len: int, adapter: str | None) -> int:
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": output_len, "temperature": 0,
                                                     "ignore_eos": True}}
    if adapter is not None:
        body["lora_name"] = adapter
    response = await client.post("/generate", json=body)
    response.raise_for_status()
    return len(response.json()["output_ids"])


async def all_at_once(base_url: str, prompts, output_len: int, adapters: list[str | None]) -> float:
    """Output tokens a second with every prompt sent at once, prompt i with ``adapters[i]``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        started = time.perf_counter()
        counts = await asyncio.gather(*[generate(client, prompt, output_len, adapter)
                                        for prompt, adapter in zip(prompts, adapters)])
        return sum(counts) / (time.perf_counter() - started)


def scheduler_pss(server: RunningServer) -> int:
    """Proportional set size, in bytes, of the server's scheduler process(es)."""
    return sum(child.memory_full_info().pss for child in server.child_processes()
               if "scheduler" in " ".join(child.cmdline()))


def adapter_memory(server: RunningServer, extra_path: Path) -> tuple[int, int]:
    """The bytes of the tensors the server holds for one more adapter, and the scheduler's PSS growth loading it."""
    before = scheduler_pss(server)
    loaded = httpx.post(server.base_url + "/load_lora_adapter", timeout=600,
                        json={"lora_name": "extra", "lora_path": str(extra_path)})
    loaded.raise_for_status()
    return loaded.json()["bytes"], scheduler_pss(server) - before


def make_adapters(model_dir: Path, parent: Path, count: int, rank: int) -> list[Path]:
    return [write_peft_adapter(model_dir, parent / f"adapter{index}", rank=rank, alpha=rank, seed=index)
            for index in range(count + 1)]  # the last one is loaded at run time, to measure memory


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--requests", type=int, default=32, help="concurrent requests")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="base/mixed pairs; the median ratio is reported")
    parser.add_argument("--model", type=Path, default=None, help="default: the built-in default model")
    parser.add_argument("--set", action="append", default=[], help="section.key=value for the server")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--quick", action="store_true", help="a few short requests: check the script works")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.requests, arguments.input_len, arguments.output_len = 4, 16, 8
    return arguments


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    arguments = parse_arguments()
    reference_dir = arguments.model or ensure_dequantized_default_model()
    vocab_size = len(AutoTokenizer.from_pretrained(reference_dir))
    generator = random.Random(1)
    prompts = [[generator.randrange(100, vocab_size) for _ in range(arguments.input_len)]
               for _ in range(arguments.requests)]
    with tempfile.TemporaryDirectory(prefix="tercet-lora-bench-") as parent:
        *paths, extra = make_adapters(reference_dir, Path(parent), arguments.adapters, arguments.rank)
        names = [f"adapter{index}" for index in range(arguments.adapters)]
        listed = ",".join(f"{name}={path}" for name, path in zip(names, paths))
        settings = [f"lora.adapters={listed}", f"lora.max_rank={max(arguments.rank, 64)}",
                    f"lora.max_loaded={arguments.adapters + 1}",
                    f"scheduler.max_running_requests={max(arguments.requests, 32)}", *arguments.set]
        arguments.log_dir.mkdir(parents=True, exist_ok=True)
        server = RunningServer(arguments.model, arguments.log_dir / "server-lora.log", settings).wait_until_healthy()
        try:
            asyncio.run(all_at_once(server.base_url, prompts[:2], 4, [None, names[0]]))  # warm-up
            mixed_adapters = [names[index % len(names)] for index in range(len(prompts))]
            rounds = [tuple(asyncio.run(all_at_once(server.base_url, prompts, arguments.output_len, adapters))
                            for adapters in ([None] * len(prompts), mixed_adapters))
                      for _ in range(arguments.rounds)]
            weight_bytes, pss_growth = adapter_memory(server, extra)
        finally:
            server.stop()
    print(f"c={arguments.requests}, {arguments.input_len} in, {arguments.output_len} out, "
          f"{arguments.adapters} adapters of rank {arguments.rank}")
    print(f"{'round':6} {'base tok/s':>10} {'mixed tok/s':>11} {'mixed/base':>10}")
    for index, (base, mixed) in enumerate(rounds):
        print(f"{index + 1:<6} {base:10.1f} {mixed:11.1f} {mixed / base:10.2f}")
    ratio = statistics.median(mixed / base for base, mixed in rounds)
    print(f"median mixed/base: {ratio:.2f} (target at least 0.80: {'met' if ratio >= 0.8 else 'missed'})")
    print(f"one adapter of rank {arguments.rank}: {weight_bytes / 2**20:.2f} MiB of tensors held; the scheduler's "
          f"PSS grew {pss_growth / 2**20:.2f} MiB loading it")


if __name__ == "__main__":
    main()
