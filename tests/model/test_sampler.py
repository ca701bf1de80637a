import torch

from tercet.model.sampler import SamplingBatch, sample, uniform_from_seed
from tercet.sampling_params import SamplingParams

VOCAB = 50


def _logits(batch_size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch_size, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _batch(params, seeds, steps):
    return SamplingBatch.from_params(params, seeds, steps, "cpu")


def test_greedy_is_argmax():
    logits = _logits(4)
    tokens = sample(logits, _batch([SamplingParams(temperature=0)] * 4, [1, 2, 3, 4], [0] * 4))
    assert tokens.tolist() == logits.argmax(-1).tolist()
    assert tokens.dtype == torch.int64


def test_greedy_rows_stay_argmax_next_to_sampled_rows():
    logits = _logits(3)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.5), SamplingParams(temperature=0)]
    tokens = sample(logits, _batch(params, [1, 2, 3], [0, 0, 0]))
    assert tokens[0] == logits[0].argmax() and tokens[2] == logits[2].argmax()


def test_same_seed_and_step_give_the_same_token_whatever_the_batch():
    logits = _logits(6)
    target = SamplingParams(temperature=1.0, top_p=0.9)
    alone = [sample(logits[i : i + 1], _batch([target], [1234], [i]))[0].item() for i in range(6)]

    others = [SamplingParams(temperature=0.7), SamplingParams(temperature=0), SamplingParams(top_p=0.5)]
    for step in range(6):
        mixed_logits = torch.cat([_logits(1, seed=99), logits[step : step + 1], _logits(2, seed=7)])
        params = [others[0], target, others[1], others[2]]
        tokens = sample(mixed_logits, _batch(params, [5, 1234, 6, 7], [3, step, 0, 9]))
        assert tokens[1].item() == alone[step]


def test_different_seeds_draw_different_numbers():
    uniforms = uniform_from_seed(torch.arange(1000), torch.zeros(1000, dtype=torch.int64))
    assert uniforms.unique().numel() > 990
    assert 0 <= uniforms.min() and uniforms.max() < 1


def test_uniform_depends_on_step():
    seeds = torch.full((100,), 42)
    assert uniform_from_seed(seeds, torch.arange(100)).unique().numel() > 95


def test_large_and_negative_seeds_are_accepted():
    logits = _logits(3)
    params = [SamplingParams(temperature=1.0)] * 3
    tokens = sample(logits, _batch(params, [2**64 - 1, -5, 2**70 + 3], [0, 0, 0]))
    assert tokens.shape == (3,)


def test_tiny_top_p_is_argmax():
    logits = _logits(5)
    params = [SamplingParams(temperature=1.3, top_p=1e-6)] * 5
    tokens = sample(logits, _batch(params, [11, 12, 13, 14, 15], [0] * 5))
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_top_p_never_picks_outside_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = [SamplingParams(temperature=1.0, top_p=0.75)] * 400
    tokens = sample(logits.expand(400, -1), _batch(params, list(range(400)), [0] * 400))
    assert set(tokens.tolist()) == {0, 1}


def test_samples_follow_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    draws = 8000
    params = [SamplingParams(temperature=1.0)] * draws
    tokens = sample(probs.log().expand(draws, -1), _batch(params, list(range(draws)), [3] * draws))
    frequencies = torch.bincount(tokens, minlength=4).float() / draws
    assert torch.allclose(frequencies, probs, atol=0.02)


def test_temperature_sharpens_the_distribution():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    draws = 4000
    params = [SamplingParams(temperature=0.25)] * draws
    tokens = sample(probs.log().expand(draws, -1), _batch(params, list(range(draws)), [0] * draws))
    expected = torch.softmax(probs.log() / 0.25, -1)
    frequencies = torch.bincount(tokens, minlength=4).float() / draws
    assert torch.allclose(frequencies, expected, atol=0.03)
