import torch

from tercet.model.sampler import SamplingBatch, sample, uniform_from_seed
from tercet.sampling_params import SamplingParams

VOCAB = 50


def _logits(batch_size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch_size, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _batch(params, seeds, steps, prompt_ids=None, output_ids=None, stop_ids=None):
    num = len(params)
    return SamplingBatch.from_params(
        params,
        seeds,
        steps,
        prompt_ids=prompt_ids if prompt_ids is not None else [[] for _ in range(num)],
        output_ids=output_ids if output_ids is not None else [[] for _ in range(num)],
        stop_token_ids_for_min_tokens=stop_ids if stop_ids is not None else [set() for _ in range(num)],
        device="cpu",
    )


def _tokens(logits, sampling_batch) -> torch.Tensor:
    return torch.tensor(sample(logits, sampling_batch).token_ids)


def test_greedy_is_argmax():
    logits = _logits(4)
    output = sample(logits, _batch([SamplingParams(temperature=0)] * 4, [1, 2, 3, 4], [0] * 4))
    assert output.token_ids == logits.argmax(-1).tolist()
    assert all(type(token_id) is int for token_id in output.token_ids)
    assert output.logprobs is None and output.top_logprobs is None


def test_greedy_rows_stay_argmax_next_to_sampled_rows():
    logits = _logits(3)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.5), SamplingParams(temperature=0)]
    tokens = _tokens(logits, _batch(params, [1, 2, 3], [0, 0, 0]))
    assert tokens[0] == logits[0].argmax() and tokens[2] == logits[2].argmax()


def test_same_seed_and_step_give_the_same_token_whatever_the_batch():
    logits = _logits(6)
    target = SamplingParams(temperature=1.0, top_p=0.9)
    alone = [sample(logits[i : i + 1], _batch([target], [1234], [i])).token_ids[0] for i in range(6)]

    others = [SamplingParams(temperature=0.7), SamplingParams(temperature=0), SamplingParams(top_p=0.5)]
    for step in range(6):
        mixed_logits = torch.cat([_logits(1, seed=99), logits[step : step + 1], _logits(2, seed=7)])
        params = [others[0], target, others[1], others[2]]
        tokens = _tokens(mixed_logits, _batch(params, [5, 1234, 6, 7], [3, step, 0, 9]))
        assert tokens[1] == alone[step]


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
    tokens = _tokens(logits, _batch(params, [2**64 - 1, -5, 2**70 + 3], [0, 0, 0]))
    assert tokens.shape == (3,)


def test_tiny_top_p_is_argmax():
    logits = _logits(5)
    params = [SamplingParams(temperature=1.3, top_p=1e-6)] * 5
    tokens = _tokens(logits, _batch(params, [11, 12, 13, 14, 15], [0] * 5))
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_top_p_never_picks_outside_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = [SamplingParams(temperature=1.0, top_p=0.75)] * 400
    tokens = _tokens(logits.expand(400, -1), _batch(params, list(range(400)), [0] * 400))
    assert set(tokens.tolist()) == {0, 1}


def test_samples_follow_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    draws = 8000
    params = [SamplingParams(temperature=1.0)] * draws
    tokens = _tokens(probs.log().expand(draws, -1), _batch(params, list(range(draws)), [3] * draws))
    frequencies = torch.bincount(tokens, minlength=4).float() / draws
    assert torch.allclose(frequencies, probs, atol=0.02)


def test_temperature_sharpens_the_distribution():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    draws = 4000
    params = [SamplingParams(temperature=0.25)] * draws
    tokens = _tokens(probs.log().expand(draws, -1), _batch(params, list(range(draws)), [0] * draws))
    expected = torch.softmax(probs.log() / 0.25, -1)
    frequencies = torch.bincount(tokens, minlength=4).float() / draws
    assert torch.allclose(frequencies, expected, atol=0.03)


def test_logit_bias_forces_a_greedy_token():
    logits = _logits(3)
    forced = int(logits[1].argmin())
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0, logit_bias={forced: 100.0})] * 2
    tokens = _tokens(torch.cat([logits[:2], logits[:2]]), _batch(params, [0] * 4, [0] * 4))
    assert tokens.tolist() == [logits[0].argmax(), forced, logits[0].argmax(), forced]


def test_logit_bias_can_ban_a_token_from_sampling():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(300, -1)
    params = [SamplingParams(temperature=1.0, logit_bias={0: -100.0})] * 300
    tokens = _tokens(logits, _batch(params, list(range(300)), [0] * 300))
    assert 0 not in tokens.tolist() and set(tokens.tolist()) == {1, 2}


def test_min_new_tokens_suppresses_eos_until_reached():
    eos = 7
    logits = torch.zeros(3, VOCAB)
    logits[:, eos] = 10.0
    params = [SamplingParams(temperature=0, min_new_tokens=2)] * 3
    tokens = _tokens(logits, _batch(params, [0] * 3, [0, 1, 2], stop_ids=[{eos, 9}] * 3))
    assert tokens[0] != eos and tokens[1] != eos
    assert tokens[2] == eos  # two tokens generated: EOS is allowed again


def test_min_new_tokens_suppresses_eos_for_sampled_rows_too():
    logits = torch.log(torch.tensor([[0.9, 0.05, 0.05]])).expand(200, -1)
    params = [SamplingParams(temperature=2.0, min_new_tokens=5)] * 200
    tokens = _tokens(logits, _batch(params, list(range(200)), [4] * 200, stop_ids=[{0}] * 200))
    assert 0 not in tokens.tolist()


def test_frequency_penalty_changes_the_greedy_choice():
    logits = torch.zeros(1, VOCAB)
    logits[0, 3], logits[0, 4] = 2.0, 1.5
    history = [[3, 3, 5]]
    plain = _tokens(logits, _batch([SamplingParams(temperature=0)], [0], [3], output_ids=history))
    penalised = _tokens(
        logits, _batch([SamplingParams(temperature=0, frequency_penalty=0.3)], [0], [3], output_ids=history)
    )
    assert plain.item() == 3 and penalised.item() == 4  # 2.0 - 2 * 0.3 < 1.5


def test_presence_penalty_counts_a_token_once():
    logits = torch.zeros(2, VOCAB)
    logits[:, 3], logits[:, 4] = 2.0, 1.5
    params = [SamplingParams(temperature=0, presence_penalty=0.4), SamplingParams(temperature=0, presence_penalty=0.6)]
    tokens = _tokens(logits, _batch(params, [0, 0], [5, 5], output_ids=[[3] * 5, [3] * 5]))
    assert tokens.tolist() == [3, 4]  # 2.0 - 0.4 stays ahead; 2.0 - 0.6 falls behind


def test_repetition_penalty_reads_the_prompt():
    logits = torch.zeros(1, VOCAB)
    logits[0, 3], logits[0, 4] = 2.0, 1.5
    params = [SamplingParams(temperature=0, repetition_penalty=1.5)]
    assert _tokens(logits, _batch(params, [0], [0], prompt_ids=[[3]])).item() == 4
    assert _tokens(logits, _batch(params, [0], [0], prompt_ids=[[1]])).item() == 3


def test_penalties_without_histories_are_refused():
    import pytest

    with pytest.raises(ValueError, match="output_ids"):
        SamplingBatch.from_params([SamplingParams(frequency_penalty=1.0)], [0], [0], device="cpu")


def test_every_stage_is_reproducible_whatever_the_batch():
    target = SamplingParams(
        temperature=0.9,
        top_k=20,
        top_p=0.95,
        min_p=0.02,
        repetition_penalty=1.2,
        frequency_penalty=0.4,
        presence_penalty=0.3,
        logit_bias={5: 2.0, 6: -3.0},
        min_new_tokens=3,
    )
    prompt, output = [1, 2, 3, 2], [4, 4, 7]
    logits = _logits(8, seed=3)

    def history(step):
        return {"prompt_ids": [prompt], "output_ids": [output[:step]], "stop_ids": [{0, 1}]}

    alone = [_tokens(logits[i : i + 1], _batch([target], [77], [i], **history(i))).item() for i in range(8)]
    others = [SamplingParams(temperature=0, logit_bias={2: 5.0}), SamplingParams(temperature=1.2, top_k=3)]
    for step in range(8):
        mixed = torch.cat([_logits(1, seed=11), logits[step : step + 1], _logits(1, seed=12)])
        tokens = _tokens(
            mixed,
            _batch(
                [others[0], target, others[1]],
                [1, 77, 2],
                [0, step, 4],
                prompt_ids=[[9], prompt, [8, 8]],
                output_ids=[[], output[:step], [1, 2, 3, 4]],
                stop_ids=[set(), {0, 1}, {0}],
            ),
        )
        assert tokens[1].item() == alone[step]


def test_top_k_never_picks_outside_the_k_best():
    logits = _logits(1, seed=4).expand(500, -1)
    params = [SamplingParams(temperature=2.0, top_k=3)] * 500
    tokens = _tokens(logits, _batch(params, list(range(500)), [0] * 500))
    assert set(tokens.tolist()) == set(logits[0].topk(3).indices.tolist())


def test_min_p_never_picks_unlikely_tokens():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.06, 0.04])
    params = [SamplingParams(temperature=1.0, min_p=0.2)] * 500
    tokens = _tokens(probs.log().expand(500, -1), _batch(params, list(range(500)), [0] * 500))
    assert set(tokens.tolist()) == {0, 1, 2}  # 0.06 < 0.2 * 0.4


def test_top_k_rows_follow_the_renormalised_distribution():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    draws = 6000
    params = [SamplingParams(temperature=1.0, top_k=2)] * draws
    tokens = _tokens(probs.log().expand(draws, -1), _batch(params, list(range(draws)), [1] * draws))
    frequencies = torch.bincount(tokens, minlength=4).float() / draws
    assert torch.allclose(frequencies, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=0.02)


def test_legacy_call_form_still_builds_a_greedy_batch():
    logits = _logits(2)
    batch = SamplingBatch.from_params([SamplingParams(temperature=0)] * 2, [0, 0], [0, 0], device="cpu")
    assert sample(logits, batch).token_ids == logits.argmax(-1).tolist()


def test_each_row_draws_the_same_token_whichever_rows_it_is_grouped_with():
    # Rows with top-k draw from their k best (the batch's widest k), rows with
    # top-p alone from a full sort, the rest in vocabulary order.
    logits = _logits(6, seed=21)
    params = [
        SamplingParams(temperature=1.1, top_k=5),
        SamplingParams(temperature=0.9, top_k=40, top_p=0.9),
        SamplingParams(temperature=1.0, top_p=0.8),
        SamplingParams(temperature=1.3, min_p=0.1),
        SamplingParams(temperature=0),
        SamplingParams(temperature=0.7),
    ]
    seeds, steps = [3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5]
    together = _tokens(logits, _batch(params, seeds, steps)).tolist()
    alone = [_tokens(logits[i : i + 1], _batch([params[i]], [seeds[i]], [steps[i]])).item() for i in range(6)]
    assert together == alone
    reversed_order = _tokens(logits.flip(0), _batch(params[::-1], seeds[::-1], steps[::-1])).tolist()
    assert reversed_order[::-1] == together
