"""A scheduler over a quantized KV pool (``[cache] kv_dtype`` int8 or fp8_e4m3) on the tiny Llama (float32
activations, paged_cpu reading the pool in place): it serves and reports its pool, a request's greedy tokens
are its own whatever its batch-mates or its prompt's chunking, and parallel completions' copies of the
prompt's K/V carry their scales. And ``model.deterministic`` on the default model keeps its promise over
a quantized cache: a token's stored K/V depend on that token alone."""

from __future__ import annotations

import random

import pytest
import torch

from tercet.formats.default_model import find_default_gguf
from tercet.ipc.control_messages import GetInternalStateReq
from tercet.native.cpu import level_in_use
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.sampling_params import SamplingParams

KV_DTYPES = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}
_draw = random.Random(4)
TARGET, *_OTHER_PROMPTS = [[_draw.randrange(50, 40000) for _ in range(_draw.randrange(12, 60))] for _ in range(6)]
OTHERS = {f"other {index}": prompt for index, prompt in enumerate(_OTHER_PROMPTS)}
POOLS = dict(max_total_tokens=1024, page_size=8, max_running_requests=8)
needs_block_kernel = pytest.mark.skipif(
    load_block_matmul() is None,
    reason=f"the block kernel does not run here (level {level_in_use().name}, or no compiler)",
)


def greedy(n: int = 1) -> SamplingParams:
    return SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True, n=n)


def served(make_harness, kv_dtype: str, requests: dict, *settings: str) -> dict[str, list[int]]:
    harness = make_harness([f"cache.kv_dtype={kv_dtype}", *settings], **POOLS)
    for rid, prompt in requests.items():
        harness.submit(rid, prompt, greedy())
    return harness.run_until_finished()


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_a_quantized_pool_serves_and_reports_its_dtype_and_tokens(make_harness, kv_dtype):
    harness = make_harness([f"cache.kv_dtype={kv_dtype}"], **POOLS)
    runner = harness.scheduler.model_runner
    assert runner.kv_cache.dtype == KV_DTYPES[kv_dtype] and runner.dtype == torch.float32
    harness.submit("target", TARGET, greedy())
    assert len(harness.run_until_finished()["target"]) == 16
    # The kernel stored the prompt's and the new tokens' rows with their scales.
    num_tokens = len(TARGET) + 15
    assert runner.kv_cache.k_scales[0].ne(0).any(dim=-1).sum() >= num_tokens
    state = harness.control(GetInternalStateReq("state")).data
    assert (state["weights"]["kv_dtype"], state["weights"]["max_total_tokens"]) == (kv_dtype, 1024)
    assert state["kv_total_tokens"] == 1024


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_a_requests_greedy_tokens_do_not_depend_on_its_batch_mates_or_chunks(make_harness, kv_dtype):
    alone = served(make_harness, kv_dtype, {"target": TARGET})["target"]
    batched = served(make_harness, kv_dtype, {**OTHERS, "target": TARGET})
    chunked = served(make_harness, kv_dtype, {"other 1": OTHERS["other 1"], "target": TARGET},
                     "scheduler.chunked_prefill_size=8")
    assert batched["target"] == alone
    assert chunked["target"] == alone


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_parallel_completions_continue_over_a_copy_of_the_prompts_values_and_scales(make_harness, kv_dtype):
    harness = make_harness([f"cache.kv_dtype={kv_dtype}"], **POOLS)
    harness.submit("one", TARGET, greedy())
    harness.submit("three", TARGET, greedy(n=3))
    tokens = harness.run_until_finished()
    # A follower whose prompt K/V came without their scales would attend over zeros.
    assert tokens["three#0"] == tokens["three#1"] == tokens["three#2"] == tokens["one"]


DETERMINISTIC = [f"model.path={find_default_gguf()}", "model.dtype=auto", "model.deterministic=true"]
SEEDED = SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, ignore_eos=True)


def _seeded_target(tercet_scheduler, kv_dtype: str, requests: dict, *settings: str, again: bool = False):
    harness = tercet_scheduler(settings=[*DETERMINISTIC, f"cache.kv_dtype={kv_dtype}", *settings],
                               max_total_tokens=4096, page_size=16, max_running_requests=8)
    for rid, prompt in requests.items():
        harness.submit(rid, prompt, SEEDED)
    first = harness.run_until_finished()["target"]
    if not again:
        return first
    harness.submit("target again", TARGET, SEEDED)  # its prompt's K/V now come from the prefix cache
    return first, harness.run_until_finished()["target again"]


@needs_block_kernel
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_deterministic_keeps_its_promise_over_a_quantized_cache(tercet_scheduler, kv_dtype):
    # The default model on its block kernel, sampling at temperature 1, where a last-bit difference changes a draw.
    alone, from_cache = _seeded_target(tercet_scheduler, kv_dtype, {"target": TARGET}, again=True)
    batched = _seeded_target(tercet_scheduler, kv_dtype, {**OTHERS, "target": TARGET})
    chunked = _seeded_target(tercet_scheduler, kv_dtype, {"other 2": OTHERS["other 2"], "target": TARGET},
                             "scheduler.chunked_prefill_size=16")
    assert len(alone) == 24
    assert batched == alone and chunked == alone and from_cache == alone
