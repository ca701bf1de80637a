"""Offline benchmark: tercet's engine against plain transformers forwards, same batch, one run.

No HTTP and no IPC. The tercet side is the real scheduler built in-process
(see ``offline_tercet``): every step is the scheduler's own admission, model
step (one forward for the whole batch, greedy sampling, stop checks) and
output building, on the real model runner and paged KV cache; only the
serialization and socket send of each step's output are left out (the IPC
round-trip benchmark, ``tercet.bench.ipc_roundtrip``, measures those). The
baseline (see ``offline_transformers``) is transformers' own model with a
hand-written greedy loop. Both get the same ``batch_size`` prompts of
``input_len`` seeded random ordinary token ids, all submitted at once, and
produce ``output_len`` tokens each, EOS ignored. A short warm-up on other
prompts runs first on each side; tercet's prefix cache is emptied after it.
Afterwards tercet's matmuls of one decode step are timed alone (see
``matmul_floor``), which splits the step into multiplications and the rest.

    python -m tercet.bench.offline --batch-size 32 --input-len 128 --output-len 128 --dtype bfloat16 [--json] [--no-transformers]
"""

from __future__ import annotations

import gc
import random

from tercet.bench.matmul_floor import time_matmuls
from tercet.bench.offline_metrics import Progress, compare_outputs, summarize
from tercet.errors import TercetError

WARMUP_OUTPUT_LEN = 4


def run_offline_benchmark(
    model_path: str | None,
    dtype: str,
    batch_size: int,
    input_len: int,
    output_len: int,
    seed: int = 0,
    with_transformers: bool = True,
    warmup: bool = True,
    *,
    device: str = "auto",
    num_threads: int | None = None,
    progress: bool = True,
    return_outputs: bool = False,
) -> dict:
    """Run both engines on the same batch; a JSON-able dict of the config, each engine's figures
    and their ratios (with ``return_outputs``, each section also carries its ``output_ids``).
    ``num_threads`` sets torch's CPU threads for both (on a shared machine, fewer threads than
    cores keeps the timings from collapsing when another process takes a core)."""
    import torch

    for name, value in (("batch_size", batch_size), ("input_len", input_len), ("output_len", output_len),
                        ("num_threads", 1 if num_threads is None else num_threads)):
        if value < 1:
            raise TercetError(f"{name} must be at least 1, got {value}")
    previous_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _run_both(model_path, dtype, batch_size, input_len, output_len, seed, with_transformers, warmup,
                         device, Progress(progress), return_outputs)
    finally:
        torch.set_num_threads(previous_threads)


def _run_both(model_path, dtype, batch_size, input_len, output_len, seed, with_transformers, warmup, device,
              report, return_outputs) -> dict:
    import torch
    import transformers

    from tercet.formats.default_model import resolve_model_path
    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    # transformers runs the same weights: the default model as its dequantized checkpoint.
    path = resolve_model_path(model_path) if model_path is not None else ensure_dequantized_default_model()
    prompts = synthetic_prompts(path, batch_size, input_len, seed)
    warmup_prompts = synthetic_prompts(path, batch_size, input_len, seed + 1)
    result = {
        "config": {
            "model_path": str(path), "model": path.name, "dtype": dtype, "device": device,
            "batch_size": batch_size, "input_len": input_len, "output_len": output_len,
            "seed": seed, "warmup": warmup, "torch": torch.__version__,
            "transformers": transformers.__version__, "torch_num_threads": torch.get_num_threads(),
        },
        "transformers": None, "ratios": {}, "greedy_match": None,
    }
    tercet_outputs, torch_dtype, torch_device = _run_tercet(
        result, path, dtype, device, prompts, warmup_prompts, output_len, warmup, report
    )
    if with_transformers:
        baseline_outputs = _run_transformers(
            result, path, torch_dtype, torch_device, prompts, warmup_prompts, output_len, warmup, report
        )
        result["ratios"] = ratios(result["tercet"], result["transformers"])
        result["greedy_match"] = {
            **compare_outputs(tercet_outputs, baseline_outputs),
            # Only float32 is expected to agree token for token; bf16 rounding differs between the two.
            "expected_to_match": result["config"]["resolved_dtype"] == "float32",
        }
        if return_outputs:
            result["transformers"]["output_ids"] = baseline_outputs
    if return_outputs:
        result["tercet"]["output_ids"] = tercet_outputs
    return result


def _run_tercet(result, path, dtype, device, prompts, warmup_prompts, output_len, warmup, report):
    from tercet.bench.offline_tercet import TercetOfflineEngine

    batch_size, input_len = len(prompts), len(prompts[0])
    report(f"tercet: loading {path.name}")
    engine = TercetOfflineEngine(path, dtype, device, batch_size, input_len + output_len)
    torch_dtype, torch_device = engine.model_runner.dtype, engine.model_runner.device
    try:
        if engine.model_runner.context_len < input_len + output_len:
            raise TercetError(f"input_len + output_len = {input_len + output_len} exceeds the model's "
                              f"context of {engine.model_runner.context_len} tokens")
        result["config"].update(resolved_dtype=engine.dtype, device=engine.device)
        if warmup:
            report("tercet: warm-up")
            engine.generate(warmup_prompts, min(output_len, WARMUP_OUTPUT_LEN), Progress(False))
            engine.forget_cached_prompts()
        report(f"tercet: {batch_size} requests x {input_len} prompt tokens, {output_len} new tokens each")
        timeline = engine.generate(prompts, output_len, report)
        result["tercet"] = {**summarize(timeline, batch_size * input_len), "num_retractions": engine.num_retractions}
        report(f"tercet: done, {result['tercet']['output_tokens_per_s']:.1f} output tok/s")
        report("tercet: timing the decode step's matmuls alone")
        result["tercet"].update(matmul_figures(engine.model_runner.model, batch_size, result["tercet"]))
    finally:
        engine.close()
        del engine
        _release_memory(torch_device)
    return timeline.output_ids, torch_dtype, torch_device


def _run_transformers(result, path, torch_dtype, torch_device, prompts, warmup_prompts, output_len, warmup, report):
    from tercet.bench.offline_transformers import TransformersBaseline

    report(f"transformers: loading {path.name}")
    baseline = TransformersBaseline(path, torch_dtype, torch_device)
    try:
        if warmup:
            report("transformers: warm-up")
            baseline.generate(warmup_prompts, min(output_len, WARMUP_OUTPUT_LEN), Progress(False))
        timeline = baseline.generate(prompts, output_len, report)
        result["transformers"] = summarize(timeline, len(prompts) * len(prompts[0]))
        report(f"transformers: done, {result['transformers']['output_tokens_per_s']:.1f} output tok/s")
    finally:
        baseline.close()
        _release_memory(torch_device)
    return timeline.output_ids


def matmul_figures(model, batch_size: int, figures: dict) -> dict:
    """The matmuls of a decode step at ``batch_size`` timed alone, and their share of the measured step."""
    matmuls = time_matmuls(model, batch_size)
    step_ms = figures.get("mean_decode_step_ms")
    return {
        "matmul_ms": matmuls["matmul_ms"],
        "num_matmuls": matmuls["num_matmuls"],
        "matmul_weight_bytes": matmuls["weight_bytes"],
        "matmul_share_of_decode_step": matmuls["matmul_ms"] / step_ms if step_ms else None,
    }


def _release_memory(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def synthetic_prompts(model_path, batch_size: int, input_len: int, seed: int) -> list[list[int]]:
    """``batch_size`` prompts of ``input_len`` ids drawn (seeded) from the vocabulary minus special tokens."""
    from transformers import AutoConfig

    from tercet.bench.workload import ordinary_token_ids
    from tercet.tokenizer.loading import load_tokenizer

    vocab_size = AutoConfig.from_pretrained(str(model_path)).vocab_size
    # The tokenizer may know more ids than the model's embedding has rows.
    ordinary = [token_id for token_id in ordinary_token_ids(load_tokenizer(str(model_path))) if token_id < vocab_size]
    rng = random.Random(seed)
    return [rng.choices(ordinary, k=input_len) for _ in range(batch_size)]


def ratios(ours: dict, theirs: dict) -> dict:
    """How many times faster tercet is on each figure (above 1: tercet is faster)."""

    def faster(numerator, denominator):
        return numerator / denominator if numerator and denominator else None

    return {
        "engine_vs_transformers": faster(ours["output_tokens_per_s"], theirs["output_tokens_per_s"]),
        "total_time": faster(theirs["total_s"], ours["total_s"]),
        "prefill_time": faster(theirs["prefill_s"], ours["prefill_s"]),
        "decode_step_time": faster(theirs["mean_decode_step_ms"], ours["mean_decode_step_ms"]),
        "itl": faster(theirs["mean_itl_ms"], ours["mean_itl_ms"]),
    }


ROWS = (
    # label, key, format, ratio key
    ("total (s)", "total_s", "{:.3f}", "total_time"),
    ("prefill (s)", "prefill_s", "{:.3f}", "prefill_time"),
    ("decode (s)", "decode_s", "{:.3f}", None),
    ("output tok/s", "output_tokens_per_s", "{:.1f}", "engine_vs_transformers"),
    ("prefill tok/s", "prefill_tokens_per_s", "{:.1f}", None),
    ("decode tok/s", "decode_tokens_per_s", "{:.1f}", None),
    ("decode step (ms)", "mean_decode_step_ms", "{:.2f}", "decode_step_time"),
    ("mean ITL (ms)", "mean_itl_ms", "{:.2f}", "itl"),
    ("mean TTFT (ms)", "mean_ttft_ms", "{:.2f}", None),
    ("matmuls alone (ms)", "matmul_ms", "{:.2f}", None),
)


def format_offline_report(result: dict) -> str:
    config = result["config"]
    lines = [
        (f"offline benchmark: {config['model']}, {config['resolved_dtype']} on {config['device']}, "
         f"batch {config['batch_size']} x {config['input_len']} prompt tokens -> {config['output_len']} new tokens "
         f"(greedy, EOS ignored, seed {config['seed']}, warm-up {'on' if config['warmup'] else 'off'})"),
        f"{'':18} {'tercet':>12} {'transformers':>13} {'tercet speedup':>15}",
    ]
    baseline = result.get("transformers")
    for label, key, number, ratio_key in ROWS:
        ratio = result["ratios"].get(ratio_key) if ratio_key else None
        lines.append(
            f"{label:18} {_cell(result['tercet'].get(key), number):>12} "
            f"{_cell(baseline.get(key) if baseline else None, number):>13} "
            f"{_cell(ratio, '{:.2f}x'):>15}"
        )
    lines.append(f"tercet retractions: {result['tercet']['num_retractions']}")
    ours = result["tercet"]
    if ours.get("matmul_share_of_decode_step"):
        lines.append(
            f"tercet decode step: {100 * ours['matmul_share_of_decode_step']:.0f}% is its {ours['num_matmuls']} "
            f"matmuls run alone ({ours['matmul_weight_bytes'] / 1e6:.0f} MB of weights, "
            f"{ours['matmul_weight_bytes'] / ours['matmul_ms'] / 1e6:.1f} GB/s); the rest is norms, rotary, "
            "attention, sampling and scheduling"
        )
    match = result.get("greedy_match")
    if match is not None:
        verdict = "identical" if match["all_match"] else "differ"
        detail = f"; first difference: request {match['first_mismatch']['request']}, " \
                 f"token {match['first_mismatch']['position']}" if match["first_mismatch"] else ""
        expectation = "" if match["expected_to_match"] else " (not expected to be identical below float32)"
        lines.append(f"greedy outputs vs transformers: {verdict}, {match['num_matching_requests']}/"
                     f"{match['num_requests']} requests equal{detail}{expectation}")
    return "\n".join(lines)


def _cell(value, number: str) -> str:
    return "-" if value is None else number.format(value)
