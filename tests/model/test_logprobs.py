"""Log-probabilities come from the raw distribution, whatever the sampling transforms."""

from __future__ import annotations

import pytest
import torch

from tercet.ipc.messages import TokenLogprobs
from tercet.model.logprobs import prompt_logprobs, prompt_logprobs_of_chunk
from tercet.model.sampler import SamplingBatch, sample
from tercet.sampling_params import SamplingParams

VOCAB = 64


def _logits(batch_size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch_size, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _sample(logits, params, steps=None, output_ids=None):
    num = len(params)
    batch = SamplingBatch.from_params(
        params,
        list(range(num)),
        steps or [0] * num,
        prompt_ids=[[1, 2, 3]] * num,
        output_ids=output_ids or [[] for _ in range(num)],
        stop_token_ids_for_min_tokens=[{0}] * num,
        device="cpu",
    )
    return sample(logits, batch)


def test_nothing_is_computed_when_no_request_asks():
    output = _sample(_logits(3), [SamplingParams(temperature=0), SamplingParams(), SamplingParams(top_logprobs_num=3)])
    assert output.logprobs is None and output.top_logprobs is None


def test_chosen_logprobs_are_raw_even_after_every_transform():
    logits = _logits(4)
    params = [
        SamplingParams(temperature=0, return_logprob=True, logit_bias={5: 50.0}),
        SamplingParams(temperature=0.3, top_k=4, return_logprob=True, top_logprobs_num=2),
        SamplingParams(temperature=1.7, top_p=0.5, repetition_penalty=1.8, frequency_penalty=1.0),
        SamplingParams(temperature=0, min_new_tokens=4, return_logprob=True, top_logprobs_num=5),
    ]
    output = _sample(logits, params, output_ids=[[5], [1, 1], [2], []])
    raw = torch.log_softmax(logits, dim=-1)
    assert output.token_ids[0] == 5  # the bias chose the token, the logprob stays the model's
    expected = raw.gather(1, torch.tensor(output.token_ids)[:, None]).squeeze(1)
    torch.testing.assert_close(torch.tensor(output.logprobs), expected)


def test_top_logprobs_are_the_best_raw_tokens_sorted_with_each_requests_length():
    logits = _logits(4, seed=1)
    top_nums = [0, 1, 5, 20]
    params = [SamplingParams(temperature=0.8, return_logprob=True, top_logprobs_num=n) for n in top_nums]
    output = _sample(logits, params)
    raw = torch.log_softmax(logits, dim=-1)
    for row, top_num in enumerate(top_nums):
        top = output.top_logprobs[row]
        assert len(top) == top_num
        values = [value for _, value in top]
        assert values == sorted(values, reverse=True)
        best = raw[row].topk(top_num) if top_num else None
        if best is not None:
            assert [token_id for token_id, _ in top] == best.indices.tolist()
            torch.testing.assert_close(torch.tensor(values), best.values)
        assert all(type(token_id) is int for token_id, _ in top)


def test_requests_that_did_not_ask_get_empty_alternatives():
    params = [
        SamplingParams(temperature=0, return_logprob=True, top_logprobs_num=2),
        SamplingParams(top_logprobs_num=4),
    ]
    output = _sample(_logits(2), params)
    assert len(output.top_logprobs[0]) == 2 and output.top_logprobs[1] == []
    assert len(output.logprobs) == 2


def test_prompt_logprobs_shift_by_one():
    logits = _logits(5, seed=2)
    prompt = [7, 3, 9, 1, 0]
    result = prompt_logprobs(logits, prompt, top_n=3)
    raw = torch.log_softmax(logits, dim=-1)
    assert result.token_ids == prompt
    assert result.logprobs[0] is None and result.top[0] == []
    for j in range(1, len(prompt)):
        assert result.logprobs[j] == pytest.approx(raw[j - 1, prompt[j]].item(), abs=1e-6)
        assert [t for t, _ in result.top[j]] == raw[j - 1].topk(3).indices.tolist()


def test_prompt_logprobs_of_chunks_join_to_the_whole():
    logits = _logits(9, seed=3)
    prompt = torch.randint(0, VOCAB, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    whole = prompt_logprobs(logits, prompt, top_n=2)
    bounds = [(0, 4), (4, 5), (5, 9)]
    parts = [prompt_logprobs_of_chunk(logits[start:end], prompt, start, top_n=2) for start, end in bounds]
    joined = TokenLogprobs.concat(parts)
    assert joined == whole
    assert len(joined.logprobs) == len(prompt)


def test_prompt_of_one_token_has_only_the_empty_entry():
    result = prompt_logprobs(_logits(1), [42], top_n=4)
    assert result == TokenLogprobs(token_ids=[42], logprobs=[None], top=[[]])
