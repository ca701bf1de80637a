"""Every installed attention backend against torch_native: the same output, and the time per step.

For the default model's attention shape (SmolLM2-135M: 9 query heads, 3 KV
heads, head size 64, 30 layers), over a paged cache whose pages are scattered
as a running server leaves them, each backend the plugins register (third
parties' too) runs decode steps at several batch sizes and one step of
prompts over cached prefixes. It prints the largest difference from
torch_native's output and the time of one step's attention for all layers
(``prepare`` once, ``forward`` per layer, as the model calls them; median of
the repeats). A backend that cannot run here says why and is skipped. Made
for a CUDA GPU (benchmarks/gpu_check.sh runs it); ``--device cpu`` with small
sizes checks the script itself (the triton backend then needs TRITON_INTERPRET=1).

    python benchmarks/attention_backends_check.py [--device cuda] [--batches 1 32 256] [--context 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from tercet.errors import ConfigError
from tercet.plugin_host.listing import unavailable_reason
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.testing.attention_cases import attention_case, copy_of

NUM_KV_HEADS, GROUP, HEAD_DIM, NUM_LAYERS, PAGE_SIZE = 3, 3, 64, 30, 16
REFERENCE = "torch_native"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_times(backend, case, repeats: int) -> list[float]:
    cache, times = copy_of(case.cache), []
    with torch.inference_mode():
        for _ in range(repeats + 2):  # two warm-up steps (kernels compile on the first)
            synchronize(case.layout.device)
            started = time.perf_counter()
            backend.prepare(case.batch, case.table)
            for _ in range(NUM_LAYERS):
                backend.forward(case.q, case.k, case.v, 1, case.batch, cache)
            synchronize(case.layout.device)
            times.append(time.perf_counter() - started)
    return times[2:]


def build_backends(factories: dict, layout) -> dict:
    backends = {}
    for name, factory in factories.items():
        reason = unavailable_reason(factory)
        try:
            backends[name] = factory(layout) if reason is None else None
        except ConfigError as error:
            reason = str(error)
        if reason is not None:
            print(f"  {name}: skipped ({reason})")
    return {name: backend for name, backend in backends.items() if backend is not None}


def compare(label: str, case, backends: dict, repeats: int) -> None:
    with torch.inference_mode():
        expected = case.run(backends[REFERENCE], copy_of(case.cache)).float()
    cells = []
    for name, backend in backends.items():
        with torch.inference_mode():
            error = (case.run(backend, copy_of(case.cache)).float() - expected).abs().max().item()
        cells.append(f"{name} {statistics.median(step_times(backend, case, repeats)) * 1e3:8.3f} ms "
                     f"(max |diff| {error:.1e})")
    print(f"  {label:32s} " + "   ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    arguments = parser.parse_args()
    device, dtype = torch.device(arguments.device), getattr(torch, arguments.dtype)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    factories = PluginRegistries.from_plugin_manager(create_plugin_manager()).attention_backends.factories()
    layout = attention_case(0, [(0, 1)], NUM_KV_HEADS, GROUP, HEAD_DIM, PAGE_SIZE, dtype, device).layout
    print(f"attention backends against {REFERENCE} on {device} ({arguments.dtype}, {NUM_LAYERS} layers a step):")
    backends = build_backends(factories, layout)
    for batch_size in arguments.batches:
        spans = [(arguments.context - 1, 1)] * batch_size
        case = attention_case(batch_size, spans, NUM_KV_HEADS, GROUP, HEAD_DIM, PAGE_SIZE, dtype, device)
        compare(f"decode {batch_size} x {arguments.context} keys", case, backends, arguments.repeats)
    prompts = [(0, arguments.prompt_len), (arguments.context, arguments.prompt_len), (arguments.context, 1)]
    case = attention_case(7, prompts, NUM_KV_HEADS, GROUP, HEAD_DIM, PAGE_SIZE, dtype, device)
    compare(f"prompts {prompts}", case, backends, arguments.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
