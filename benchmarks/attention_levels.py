"""The paged_cpu attention kernel at each x86 level named: a fresh prompt's step and a decoding step.

The default model's attention shape (9 query heads, 3 KV heads, head size 64) over a paged cache
of random rows. For each case it times one layer's attention (``prepare``, then ``forward``), the
levels called in turn within each repeat, and prints each level's median against the first level's.
At ``avx512`` (AVX512-BF16) a bfloat16 cache runs on bfloat16 dot products; ``avx512vnni`` is the
same vector code on float32 multiply-adds, so the two side by side measure that change alone.
Run it with nothing else on the machine:

    python benchmarks/attention_levels.py --levels avx512vnni avx512 [--prompts 2048 8000] [--decode 32x1024]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tercet.native.cpu import runnable_levels
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.plugins.paged_cpu_attention.build import load_kernel
from tercet.testing.attention_cases import attention_case, copy_of

NUM_KV_HEADS, GROUP, HEAD_DIM, PAGE_SIZE = 3, 3, 64, 16


def cases(prompts: list[int], decodes: list[str], dtype: torch.dtype, kv_dtype: torch.dtype | None):
    """{label: case}: one fresh prompt of each length; each ``BATCHxCONTEXT`` decoding step."""
    found = {}
    for tokens in prompts:
        found[f"prompt of {tokens}"] = attention_case(1, [(0, tokens)], NUM_KV_HEADS, GROUP, HEAD_DIM, PAGE_SIZE,
                                                      dtype, kv_dtype=kv_dtype)
    for shape in decodes:
        batch, context = (int(part) for part in shape.split("x"))
        found[f"decode {batch} x {context}"] = attention_case(2, [(context, 1)] * batch, NUM_KV_HEADS, GROUP,
                                                              HEAD_DIM, PAGE_SIZE, dtype, kv_dtype=kv_dtype)
    return found


def time_levels(case, kernels: dict, repeats: int) -> dict[str, float]:
    """{level: median ms} of the case's step, the levels in turn within each repeat."""
    backends = {name: PagedCpuAttentionBackend(case.layout, kernel) for name, kernel in kernels.items()}
    cache = copy_of(case.cache)
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(repeats):
        for name, backend in backends.items():
            started = time.perf_counter()
            case.run(backend, cache)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["avx512vnni", "avx512"])
    parser.add_argument("--prompts", type=int, nargs="*", default=[512, 2048, 8000])
    parser.add_argument("--decode", nargs="*", default=["1x1024", "32x1024"], help="BATCHxCONTEXT")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--kv-dtype", default=None, choices=("bfloat16", "float32"),
                        help="the cache's dtype (default: the activations')")
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    runnable = {level.name: level for level in runnable_levels()}
    missing = [name for name in arguments.levels if name not in runnable]
    if missing:
        parser.error(f"this CPU does not run {', '.join(missing)}; it runs {', '.join(runnable)}")
    dtype = getattr(torch, arguments.dtype)
    kv_dtype = getattr(torch, arguments.kv_dtype) if arguments.kv_dtype else None
    print(f"| step | {' | '.join(arguments.levels)} | {arguments.levels[-1]} / {arguments.levels[0]} |")
    print(f"|---|{'---|' * len(arguments.levels)}---|")
    for label, case in cases(arguments.prompts, arguments.decode, dtype, kv_dtype).items():
        kernels = {name: load_kernel(case.layout, level=runnable[name]) for name in arguments.levels}
        medians = time_levels(case, kernels, arguments.repeats)
        cells = " | ".join(f"{medians[name]:.3g} ms" for name in arguments.levels)
        ratio = medians[arguments.levels[-1]] / medians[arguments.levels[0]]
        print(f"| {label} | {cells} | {ratio:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
