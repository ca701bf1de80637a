"""Where a decode step goes: torch's profiler over the real scheduler's steps at batch 1 and 32.

Drives the default model through tercet's scheduler in process (as
``tercet bench offline`` does), lets every request finish its prefill, then
profiles decode steps. Prints, per step: wall time, torch ops dispatched, and
the milliseconds of each part: the linear layers (tercet's block kernel),
the decode attention, the fused norms, SiLU and rotary, and the other ops by
name. The profiler's own cost per op and per labelled call inflates the step
(compare its wall time with an unprofiled run's). Run on an
otherwise idle machine:

    python benchmarks/decode_step_profile.py --batch-sizes 1 32
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from tercet.bench.offline_tercet import CollectingSender, TercetOfflineEngine
from tercet.formats.default_model import find_default_gguf
from tercet.ipc.messages import TokenizedGenerateReq
from tercet.model.fused_ops import CpuFusedOps
from tercet.model.native_layers import NativeLayers
from tercet.plugins.linear_layers.block_matmul import KernelBlockLinear
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.sampling_params import SamplingParams

# Parts whose work runs outside torch's ops (ctypes calls): labelled so the profile sees them.
LABELLED = {
    (NativeLayers, "run_in_one_call"): "every layer in one C call (block kernel, attention, fused steps)",
    (KernelBlockLinear, "forward"): "block kernel, called from Python (the LM head; every layer without the one call)",
    (PagedCpuAttentionBackend, "forward"): "paged decode attention",
    (CpuFusedOps, "rms_norm"): "fused RMSNorm (+ residual add)",
    (CpuFusedOps, "silu_mul"): "fused SiLU·mul",
    (CpuFusedOps, "rotary_"): "fused rotary",
}


def _label_native_calls() -> None:
    for (cls, name), label in LABELLED.items():
        method = getattr(cls, name)

        @functools.wraps(method)
        def labelled(self, *args, _method=method, _label=label, **kwargs):
            with record_function(_label):
                return _method(self, *args, **kwargs)

        setattr(cls, name, labelled)


def _decoding_engine(batch_size: int, prompt_len: int, steps: int) -> TercetOfflineEngine:
    engine = TercetOfflineEngine(find_default_gguf(), "auto", "cpu", batch_size, prompt_len + steps + 8)
    engine.scheduler.sender_to_detokenizer = CollectingSender(lambda message, now: None)
    generator = random.Random(0)
    params = SamplingParams(max_new_tokens=steps + 8, temperature=0.0, ignore_eos=True)
    for index in range(batch_size):
        prompt = [generator.randrange(100, 40000) for _ in range(prompt_len)]
        engine.scheduler.io.dispatcher(TokenizedGenerateReq(f"profile-{index}", prompt, params))
    scheduler = engine.scheduler
    while scheduler.queues.waiting or len(scheduler.queues.running) < batch_size:
        scheduler.run_step()
    for _ in range(3):  # past every prefill, and warm
        scheduler.run_step()
    return engine


def profile_steps(batch_size: int, prompt_len: int, steps: int) -> None:
    engine = _decoding_engine(batch_size, prompt_len, steps)
    scheduler = engine.scheduler
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        started = time.perf_counter()
        for _ in range(steps):
            scheduler.run_step()
        wall_ms = (time.perf_counter() - started) / steps * 1e3
    engine.close()
    events = profiled.key_averages()
    labels = {event.key: event.cpu_time_total / 1e3 / steps for event in events if event.key in LABELLED.values()}
    top_level = Counter()
    for event in events:
        if event.key.startswith("aten::") or event.key.startswith("mkldnn::"):
            top_level[event.key] += event.self_cpu_time_total / 1e3 / steps
    ops = sum(1 for event in profiled.events() if event.name.startswith("aten::") and _is_top_level(event)) / steps
    print(f"\nbatch {batch_size}: {wall_ms:.2f} ms a step (profiled), {ops:.0f} torch ops dispatched a step")
    for label, ms in labels.items():
        print(f"  {label}: {ms:.2f} ms")
    print("  other torch ops by self time:")
    for name, ms in top_level.most_common(12):
        print(f"    {name}: {ms:.3f} ms")


def _is_top_level(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    arguments = parser.parse_args()
    _label_native_calls()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for batch_size in arguments.batch_sizes:
        profile_steps(batch_size, arguments.prompt_len, arguments.steps)


if __name__ == "__main__":
    main()
