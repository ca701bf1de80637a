"""Each logits stage against transformers' processors or a direct loop, in mixed batches."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers.generation.logits_process import (
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from tercet.model.logits_processing import LogitEdits
from tercet.model.truncation import Truncation
from tercet.sampling_params import SamplingParams

VOCAB = 120


def _logits(batch_size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch_size, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2


def _histories(batch_size: int, length: int, seed: int) -> list[list[int]]:
    ids = torch.randint(0, VOCAB, (batch_size, length), generator=torch.Generator().manual_seed(seed))
    return ids.tolist()


def _edits(params, steps=None, prompt_ids=None, output_ids=None, stop_ids=None) -> LogitEdits:
    num = len(params)
    return LogitEdits.from_requests(
        params,
        steps if steps is not None else [0] * num,
        prompt_ids if prompt_ids is not None else [[] for _ in range(num)],
        output_ids if output_ids is not None else [[] for _ in range(num)],
        stop_ids if stop_ids is not None else [set() for _ in range(num)],
        "cpu",
    )


def test_no_stage_in_use_returns_the_same_tensor():
    logits = _logits(3)
    edits = _edits([SamplingParams(), SamplingParams(temperature=0), SamplingParams(top_k=5)])
    assert edits.is_empty
    assert edits.apply(logits) is logits


def test_raw_logits_are_left_untouched():
    logits = _logits(2)
    raw = logits.clone()
    edits = _edits([SamplingParams(logit_bias={1: 5.0}, repetition_penalty=2.0)] * 2, prompt_ids=[[1, 2], [3]])
    processed = edits.apply(logits)
    assert torch.equal(logits, raw) and not torch.equal(processed, raw)


def test_repetition_penalty_matches_transformers_in_a_mixed_batch():
    penalties = [1.3, 1.0, 0.7, 2.5]
    prompts = _histories(4, 12, seed=1)
    outputs = _histories(4, 5, seed=2)
    logits = _logits(4)
    params = [SamplingParams(repetition_penalty=p) for p in penalties]
    processed = _edits(params, prompt_ids=prompts, output_ids=outputs).apply(logits)
    for row, penalty in enumerate(penalties):
        input_ids = torch.tensor([prompts[row] + outputs[row]])
        expected = RepetitionPenaltyLogitsProcessor(penalty)(input_ids, logits[row : row + 1].clone())
        torch.testing.assert_close(processed[row], expected[0])


def test_frequency_and_presence_penalties_match_a_direct_loop():
    settings = [(0.5, 0.0), (0.0, 0.0), (0.0, 1.2), (-0.4, 0.8)]
    prompts = _histories(4, 10, seed=3)
    outputs = _histories(4, 40, seed=4)
    logits = _logits(4, seed=1)
    params = [SamplingParams(frequency_penalty=f, presence_penalty=p) for f, p in settings]
    processed = _edits(params, prompt_ids=prompts, output_ids=outputs).apply(logits)
    expected = logits.clone()
    for row, (frequency, presence) in enumerate(settings):
        # Only the output counts, never the prompt.
        for token_id, count in Counter(outputs[row]).items():
            expected[row, token_id] -= frequency * count + presence
    torch.testing.assert_close(processed, expected)


def test_logit_bias_matches_a_direct_loop():
    biases = [{3: 1.5, 7: -100.0}, {}, {3: -2.0, 119: 4.0}]
    logits = _logits(3, seed=2)
    processed = _edits([SamplingParams(logit_bias=b) for b in biases]).apply(logits)
    expected = logits.clone()
    for row, bias in enumerate(biases):
        for token_id, value in bias.items():
            expected[row, token_id] += value
    torch.testing.assert_close(processed, expected)


def test_min_new_tokens_matches_transformers():
    eos_ids = [5, 9]
    steps = [0, 2, 3, 1]
    params = [SamplingParams(min_new_tokens=n) for n in (3, 3, 3, 0)]
    logits = _logits(4, seed=5)
    processed = _edits(params, steps=steps, stop_ids=[set(eos_ids)] * 4).apply(logits)
    prompt_length = 6
    for row, (p, step) in enumerate(zip(params, steps)):
        processor = MinNewTokensLengthLogitsProcessor(prompt_length, p.min_new_tokens, eos_ids)
        input_ids = torch.zeros(1, prompt_length + step, dtype=torch.int64)
        expected = processor(input_ids, logits[row : row + 1].clone())
        assert torch.equal(processed[row], expected[0])


def test_stages_apply_in_order_bias_repetition_output_penalties():
    logits = _logits(2, seed=6)
    prompts, outputs = [[1, 2], [4]], [[2, 2, 3], []]
    params = [
        SamplingParams(logit_bias={2: 3.0}, repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=0.25),
        SamplingParams(logit_bias={4: -1.0}, repetition_penalty=2.0),
    ]
    processed = _edits(params, prompt_ids=prompts, output_ids=outputs).apply(logits)
    expected = logits.clone()
    expected[0, 2] += 3.0
    expected[1, 4] -= 1.0
    expected[0:1] = RepetitionPenaltyLogitsProcessor(1.5)(torch.tensor([[1, 2, 2, 2, 3]]), expected[0:1])
    expected[1:2] = RepetitionPenaltyLogitsProcessor(2.0)(torch.tensor([[4]]), expected[1:2])
    expected[0, 2] -= 0.5 * 2 + 0.25
    expected[0, 3] -= 0.5 * 1 + 0.25
    torch.testing.assert_close(processed, expected)


def _kept_by_truncation(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    temperatures = torch.tensor([p.temperature for p in params])[:, None]
    sorted_logits, sorted_tokens = (logits / temperatures).sort(dim=-1, descending=True)
    weights = Truncation.from_params(params, "cpu").kept_weights(sorted_logits)
    return torch.zeros_like(logits, dtype=torch.bool).scatter(1, sorted_tokens, weights > 0)


def _kept_by_transformers(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    scores = TemperatureLogitsWarper(p.temperature)(None, logits[None].clone())
    if p.top_k > 0:
        scores = TopKLogitsWarper(p.top_k)(None, scores)
    if p.top_p < 1.0:
        scores = TopPLogitsWarper(p.top_p)(None, scores)
    if p.min_p > 0.0:
        scores = MinPLogitsWarper(p.min_p)(None, scores)
    return scores[0] > float("-inf")


@pytest.mark.parametrize(
    "params",
    [
        [SamplingParams(top_k=k) for k in (1, 5, -1, 0, 40)],
        [SamplingParams(top_p=p) for p in (0.1, 0.5, 1.0, 0.9)],
        [SamplingParams(min_p=m) for m in (0.0, 0.05, 0.3, 0.9)],
        [
            SamplingParams(temperature=0.7, top_k=30, top_p=0.8, min_p=0.05),
            SamplingParams(temperature=1.5, top_k=10),
            SamplingParams(temperature=1.0),
            SamplingParams(temperature=2.0, top_p=0.6, min_p=0.1),
            SamplingParams(temperature=0.5, top_k=50, min_p=0.2),
        ],
    ],
    ids=["top_k", "top_p", "min_p", "chained"],
)
def test_truncation_keeps_what_transformers_keeps(params):
    logits = _logits(len(params), seed=7)
    kept = _kept_by_truncation(logits, params)
    for row, p in enumerate(params):
        assert torch.equal(kept[row], _kept_by_transformers(logits[row], p)), f"row {row}: {p}"


def test_unused_filters_are_skipped():
    truncation = Truncation.from_params([SamplingParams(), SamplingParams(temperature=0.5, top_k=0)], "cpu")
    assert truncation.top_ks is None and truncation.top_ps is None and truncation.min_ps is None
