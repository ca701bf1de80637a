"""The linear methods on CUDA: each against its dequantized reference, and the decode step time.

A short prepared check for a machine with a CUDA GPU (none is at hand where
tercet is usually developed). It

1. builds each method's layer (q4_0, q4_1, q8_0 from GGUF-style blocks; int8
   per channel; dense) on ``cuda`` for the default model's layer shapes and
   compares its output in bfloat16 with the same weights dequantized, in
   float32, printing the relative error and failing above ``--max-error``;
2. loads the default model from its GGUF on CUDA (q4_1 blocks as shipped)
   and on CUDA dense bfloat16, and prints the decode step time at batch 1
   and 32 for both, plus top-1 agreement of the two over a short prompt.

    python benchmarks/cuda_linear_check.py            # exit status 0: all methods within bounds
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]


def check_methods(max_error: float) -> bool:
    from tercet.formats.gguf_blocks import quantize_blocks
    from tercet.model.linear_method import LinearTarget
    from tercet.plugins.linear_layers.methods import BlockLinearMethod, DenseLinearMethod, Int8LinearMethod
    from tercet.plugins.linear_layers.quantized import quantize_per_channel

    device = torch.device("cuda")
    target = LinearTarget("check", torch.bfloat16, device)
    all_good = True
    for out_features, in_features in SHAPES:
        torch.manual_seed(0)
        weight = torch.randn(out_features, in_features) * 0.05
        x = torch.randn(32, in_features)
        cases = {}
        for type_name in ("Q4_0", "Q4_1", "Q8_0"):
            block = quantize_blocks(weight, type_name)
            cases[type_name.lower()] = (BlockLinearMethod(type_name).create(block, None, target), block.dequantize())
        codes, scales = quantize_per_channel(weight)
        cases["int8"] = (Int8LinearMethod().create(weight, None, target), codes.float() * scales[:, None])
        cases["dense"] = (DenseLinearMethod().create(weight, None, target), weight)
        for name, (layer, reference_weight) in cases.items():
            out = layer(x.to(device, torch.bfloat16)).float().cpu()
            reference = x.bfloat16().float() @ reference_weight.t()
            error = ((out - reference).norm() / reference.norm()).item()
            good = error <= max_error
            all_good &= good
            print(f"{name:6s} [{out_features:5d} x {in_features:4d}] relative error {error:.2e} {'ok' if good else 'FAIL'}")
    return all_good


def step_times() -> None:
    from tercet.formats.default_model import find_default_gguf
    from tercet.testing.runner_factory import model_runner_for

    prompt = [1, 504, 3458, 282, 4649, 314, 216, 12, 2343, 30, 1393, 282]
    logits = {}
    for quantization in ("auto", "none"):
        runner = model_runner_for(
            find_default_gguf(), dtype="bfloat16", device="cuda", quantization=quantization,
            max_total_tokens=32 * 512, max_running_requests=32,
        )
        rows = []
        for _ in range(32):
            row = runner.req_to_token_pool.alloc()
            runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(32 * 16 // runner.page_size), runner.page_size)
            rows.append(row)
        for row in rows:
            last = runner.forward(runner.build_batch([row], [0], [prompt]))
        logits[quantization] = last.float().cpu()
        for batch_size in (1, 32):
            batch_rows = rows[:batch_size]

            def step():
                runner.forward(runner.build_batch(batch_rows, [len(prompt)] * batch_size, [[7]] * batch_size))

            for _ in range(5):
                step()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(50):
                step()
            torch.cuda.synchronize()
            per_step = (time.perf_counter() - started) / 50 * 1e3
            print(f"quantization={quantization}: decode step at batch {batch_size}: {per_step:.2f} ms "
                  f"(weights {runner.load_report.weight_format})")
    same = (logits["auto"].argmax(-1) == logits["none"].argmax(-1)).float().mean().item()
    print(f"next-token top-1 agreement, q4_1 against dense bfloat16: {same:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-error", type=float, default=0.02)
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    good = check_methods(arguments.max_error)
    step_times()
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
