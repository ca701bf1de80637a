"""A quantized KV cache against the bfloat16 cache: greedy agreement and KL divergence on real text.

    python3 benchmarks/kv_cache_agreement.py [--tokens 384] [--run float32 --run served]

The default model, teacher-forced over the first ``--tokens`` tokens of each of eight of this
project's documents (README.md and seven of docs/), all prefilled in one step on ``paged_cpu``,
which writes the cache in its dtype and reads it in place. For each ``[cache] kv_dtype`` (float32,
int8, fp8_e4m3) against bfloat16: the share of positions whose top-1 token is the bfloat16 cache's,
the mean KL divergence from the bfloat16 cache's distribution, and the largest difference of the
log-probability of its top token. Two model runs:

- ``float32``: the weights dequantized, float32 activations, so the cache is the only difference;
- ``served``: as served by default (Q4_1 weights, bfloat16 activations), whose bfloat16 logits
  tie and flip at the smallest change of anything (see tests/e2e/test_quantized_kv_agreement.py).

No figure here depends on timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from tercet.formats.default_model import find_default_gguf
from tercet.testing.runner_factory import model_runner_for
from tercet.testing.teacher_forcing import teacher_forced_logprobs
from tercet.tokenizer.loading import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/architecture.md", "docs/scheduling.md", "docs/parallelism.md",
             "docs/configuration.md", "docs/plugins.md", "docs/benchmarks.md", "docs/api.md")
RUNS = {"float32": dict(dtype="float32", quantization="none"), "served": dict(dtype="auto", quantization="auto")}
PAGE = 16


def teacher_forced(run: str, kv_dtype: str, prompts: list[list[int]]) -> torch.Tensor:
    """``[positions, vocab]`` log-probabilities of every position of every prompt, prefilled in one step."""
    runner = model_runner_for(find_default_gguf(), device="cpu", max_total_tokens=sum(map(len, prompts)) + 64,
                              page_size=PAGE, max_running_requests=len(prompts), kv_dtype=kv_dtype, **RUNS[run])
    return teacher_forced_logprobs(runner, prompts)


def compared(reference: torch.Tensor, other: torch.Tensor) -> dict:
    top = reference.argmax(dim=-1, keepdim=True)
    return {
        "top1_agreement": (other.argmax(dim=-1, keepdim=True) == top).float().mean().item(),
        "mean_kl": (reference.exp() * (reference - other)).sum(dim=-1).mean().item(),
        "largest_top_logprob_difference": (other.gather(1, top) - reference.gather(1, top)).abs().max().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=384, help="tokens of each document")
    parser.add_argument("--run", action="append", choices=tuple(RUNS), help="model runs (default: both)")
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(find_default_gguf()))
    prompts = [tokenizer.encode((ROOT / name).read_text())[:args.tokens] for name in DOCUMENTS]
    print(f"{sum(map(len, prompts))} positions of {len(prompts)} documents, against the bfloat16 cache")
    for run in args.run or tuple(RUNS):
        reference = teacher_forced(run, "bfloat16", prompts)
        for kv_dtype in ("float32", "int8", "fp8_e4m3"):
            figures = compared(reference, teacher_forced(run, kv_dtype, prompts))
            print(f"  {run:8s} kv_dtype {kv_dtype:9s} top-1 agreement {figures['top1_agreement']:.4f}   mean KL "
                  f"{figures['mean_kl']:.2e}   largest top-token log-probability difference "
                  f"{figures['largest_top_logprob_difference']:.3f}")


if __name__ == "__main__":
    main()
