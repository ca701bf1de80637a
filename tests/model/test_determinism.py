"""``model.deterministic``: a request's tokens are its own, whatever shares its steps.

The default model at its Q4_1 blocks in bfloat16 (block kernel, paged_cpu
every step) samples a seeded request at temperature 1 (where a last-bit
difference in the logits changes the draw) alone, among batch-mates of other
lengths, with its prompt cut into small chunks, and again from a warm prefix
cache: the tokens are the same each time (with prompt attention on torch's
SDPA, as paged_cpu ran it before, the batched run differed from the first
token on). What cannot keep the promise is refused at start-up, naming why.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from tercet.errors import ConfigError
from tercet.formats.default_model import find_default_gguf
from tercet.model.determinism import require_batch_invariant_layers
from tercet.native.cpu import level_in_use
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.sampling_params import SamplingParams

DEFAULT_MODEL = [f"model.path={find_default_gguf()}", "model.dtype=auto"]
DETERMINISTIC = [*DEFAULT_MODEL, "model.deterministic=true"]
POOLS = dict(max_total_tokens=4096, page_size=16, max_running_requests=8)
_draw = random.Random(1)
TARGET, *_OTHER_PROMPTS = [[_draw.randrange(100, 40000) for _ in range(_draw.randrange(20, 90))] for _ in range(8)]
OTHERS = {f"other {index}": prompt for index, prompt in enumerate(_OTHER_PROMPTS)}
SEEDED = SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, ignore_eos=True)

needs_block_kernel = pytest.mark.skipif(
    load_block_matmul() is None, reason=f"the block kernel does not run here (level {level_in_use().name}, or no compiler)"
)


def _tokens(tercet_scheduler, requests: dict, settings=(), repeat_target: bool = False) -> list[int]:
    harness = tercet_scheduler(settings=[*DETERMINISTIC, *settings], **POOLS)
    for rid, prompt in requests.items():
        harness.submit(rid, prompt, SEEDED)
    first = harness.run_until_finished()["target"]
    if not repeat_target:
        return first
    harness.submit("target again", TARGET, SEEDED)  # its prompt now comes from the prefix cache
    return [first, harness.run_until_finished()["target again"]]


@needs_block_kernel
def test_a_seeded_request_samples_the_same_tokens_alone_batched_chunked_and_cached(tercet_scheduler):
    alone, from_cache = _tokens(tercet_scheduler, {"target": TARGET}, repeat_target=True)
    batched = _tokens(tercet_scheduler, {**OTHERS, "target": TARGET})
    chunked = _tokens(tercet_scheduler, {"other 2": OTHERS["other 2"], "target": TARGET},
                      ["scheduler.chunked_prefill_size=16"])
    assert len(alone) == 24
    assert batched == alone
    assert chunked == alone
    assert from_cache == alone


def test_dense_weights_are_refused_naming_a_layer(tercet_scheduler):
    # The tiny Llama in float32: dense layers.
    with pytest.raises(ConfigError, match=r"needs every linear layer on a batch-invariant kernel.*model\.layers\.0"):
        tercet_scheduler(settings=["model.deterministic=true"])


@needs_block_kernel
def test_an_attention_backend_that_cannot_promise_it_is_refused(tercet_scheduler):
    with pytest.raises(ConfigError, match="torch_native cannot serve model.deterministic"):
        tercet_scheduler(settings=[*DETERMINISTIC, "attention.backend=torch_native"], **POOLS)


def test_the_check_names_layers_whose_rows_depend_on_each_other():
    invariant = nn.Linear(4, 4)
    invariant.batch_invariant = True
    require_batch_invariant_layers(nn.Sequential(invariant))
    with pytest.raises(ConfigError, match="1 are not"):
        require_batch_invariant_layers(nn.Sequential(invariant, nn.Linear(4, 4, dtype=torch.bfloat16)))
