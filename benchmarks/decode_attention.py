"""Decode attention alone: the ``paged_cpu`` kernel against ``torch_native``, per layer.

The default model's attention shape (SmolLM2-135M: 9 query heads, 3 KV heads,
head size 64, 30 layers) over a paged bfloat16 (or float32) cache, each
sequence's pages scattered over the pool as a running server leaves them.
For each batch size and context length it times one decode step's attention
for all layers (``prepare`` once, then ``forward`` per layer, as the model
calls them), best and median of the repeats, and says how many times faster
the kernel is. Run it with nothing else on the machine.

    python benchmarks/decode_attention.py [--dtype bfloat16] [--batches 1 8 32] [--contexts 256 1024]
        [--kv-dtypes int8 fp8_e4m3]

With ``--kv-dtypes`` it times the kernel alone over a cache of the activations' dtype and over
each quantized cache named (random rows quantized as the kernel stores them, with their scales),
and gives each one's median time against the first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tercet.plugin_api import AttentionLayout
from tercet.model.kv_cache import quantize_rows
from tercet.plugin_api.model import ForwardBatch, PagedKVCache
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.plugins.paged_cpu_attention.build import load_kernel
from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, NUM_LAYERS, PAGE_SIZE = 9, 3, 64, 30, 16


KV_DTYPES = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}


def decode_step(batch_size: int, context: int, dtype: torch.dtype, kv_dtype: torch.dtype | None = None):
    pages_per_sequence = (context + PAGE_SIZE - 1) // PAGE_SIZE
    num_pages = pages_per_sequence * batch_size
    cache = PagedKVCache(NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM, num_pages, PAGE_SIZE, kv_dtype or dtype, "cpu")
    for index, buffer in enumerate((*cache.k_buffers, *cache.v_buffers)):
        if cache.quantized:
            scales = (*cache.k_scales, *cache.v_scales)[index]
            stored, row_scales = quantize_rows(torch.randn(buffer.shape), cache.dtype)
            buffer.copy_(stored)
            scales.copy_(row_scales)
        else:
            buffer.normal_()
    pages = torch.randperm(num_pages).view(batch_size, pages_per_sequence)
    table = (pages.unsqueeze(-1) * PAGE_SIZE + torch.arange(PAGE_SIZE)).view(batch_size, -1)
    batch = ForwardBatch.build(list(range(batch_size)), [context - 1] * batch_size, [[1]] * batch_size, table, "cpu")
    fused = torch.randn(batch_size, NUM_HEADS + 2 * NUM_KV_HEADS, HEAD_DIM).to(dtype)
    q, k, v = fused.split([NUM_HEADS, NUM_KV_HEADS, NUM_KV_HEADS], dim=1)
    return cache, table, batch, q, k, v


def time_step(backend, cache, table, batch, q, k, v, repeats: int) -> list[float]:
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 2):  # two warm-up steps
            started = time.perf_counter()
            backend.prepare(batch, table)
            for layer in range(NUM_LAYERS):
                backend.forward(q, k, v, layer, batch, cache)
            times.append(time.perf_counter() - started)
    return times[2:]


def compare_cache_dtypes(args, dtype: torch.dtype) -> None:
    """The kernel over a cache of ``dtype`` and over each of ``args.kv_dtypes``, one after the other."""
    names = [args.dtype, *args.kv_dtypes]
    print(f"paged_cpu decode attention, {NUM_LAYERS} layers, {args.dtype} activations, {torch.get_num_threads()} "
          "threads (ms per step: best / median; median against the first cache)")
    for context in args.contexts:
        for batch_size in args.batches:
            medians, cells = {}, []
            for name in names:
                layout = AttentionLayout(NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, NUM_LAYERS, torch.device("cpu"), dtype,
                                         kv_dtype=KV_DTYPES.get(name))
                step = decode_step(batch_size, context, dtype, KV_DTYPES.get(name))
                times = time_step(PagedCpuAttentionBackend(layout, load_kernel(layout)), *step, args.repeats)
                medians[name] = statistics.median(times)
                cells.append(f"{name} {min(times) * 1e3:6.2f} / {medians[name] * 1e3:6.2f} "
                             f"({medians[name] / medians[names[0]]:.2f}x)")
            print(f"  batch {batch_size:3d}, context {context:5d}:   " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--kv-dtypes", nargs="+", default=[], choices=tuple(KV_DTYPES))
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    if args.kv_dtypes:
        compare_cache_dtypes(args, dtype)
        return
    layout = AttentionLayout(NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, NUM_LAYERS, torch.device("cpu"), dtype)
    backends = {"torch_native": TorchNativeAttentionBackend(layout),
                "paged_cpu": PagedCpuAttentionBackend(layout, load_kernel(layout))}
    print(f"decode attention, {NUM_LAYERS} layers, {args.dtype} cache, {torch.get_num_threads()} threads "
          "(ms per step: best / median)")
    for context in args.contexts:
        for batch_size in args.batches:
            step = decode_step(batch_size, context, dtype)
            results = {name: time_step(backend, *step, args.repeats) for name, backend in backends.items()}
            cells = "   ".join(f"{name} {min(times) * 1e3:7.2f} / {statistics.median(times) * 1e3:7.2f}"
                               for name, times in results.items())
            speedup = statistics.median(results["torch_native"]) / statistics.median(results["paged_cpu"])
            print(f"  batch {batch_size:3d}, context {context:5d}:   {cells}   ({speedup:.1f}x)")


if __name__ == "__main__":
    main()
