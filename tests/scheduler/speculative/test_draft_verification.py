"""Verifying drafts: the accepted prefix, and the sampling rule keeping the target's distribution."""

from __future__ import annotations

import torch

from tercet.containment import ContainedFailures
from tercet.sampling_params import SamplingParams
from tercet.scheduler.req import Req
from tercet.scheduler.row_sampling import TokenChoice, sample_rows
from tercet.scheduler.speculative.draft_verification import accepted_prefix
from tercet.scheduler.stop_conditions import StopConditions

# The chi-square statistic's 0.1% critical value with 5 degrees of freedom (6 tokens).
CHI_SQUARE_5_DOF_AT_0_1_PERCENT = 20.515


def choices(*token_ids):
    return [TokenChoice(token_id) for token_id in token_ids]


def test_the_prefix_equal_to_the_target_then_the_target_own_token():
    assert [c.token_id for c in accepted_prefix([5, 6, 7], choices(5, 6, 9, 4))] == [5, 6, 9]
    assert [c.token_id for c in accepted_prefix([5, 6], choices(5, 6, 8))] == [5, 6, 8]  # all, plus the bonus one
    assert [c.token_id for c in accepted_prefix([5, 6], choices(1, 6, 8))] == [1]


def chi_square(samples: list[int], probabilities: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(samples), minlength=len(probabilities)).double()
    expected = probabilities.double() * len(samples)
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampled_drafts_leave_the_target_distribution_as_it_is():
    """A draft ``d`` verified over 20,000 seeds: the first emitted token follows the target's
    first row, and the token after an accepted draft follows its second row."""
    first_logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 0.2, 0.8])
    second_logits = torch.tensor([0.3, -1.0, 0.9, 0.1, 0.0, 0.4])
    draft = 5  # about a quarter of the first row's mass: both outcomes are common
    params = SamplingParams(temperature=1.0)
    reqs = [Req(f"r{seed}", [1, 2], params, seed, seed=seed) for seed in range(20_000)]
    rows = [req for req in reqs for _ in range(2)]
    logits = torch.stack([first_logits, second_logits]).repeat(len(reqs), 1)
    sampled = sample_rows(rows, logits, StopConditions(set(), None), ContainedFailures("test"), queues=None,
                          assumed=[[], [draft]] * len(reqs))
    emitted = [accepted_prefix([draft], sampled[2 * i: 2 * i + 2]) for i in range(len(reqs))]
    first = [tokens[0].token_id for tokens in emitted]
    after_accepted = [tokens[1].token_id for tokens in emitted if len(tokens) == 2]
    assert chi_square(first, torch.softmax(first_logits, 0)) < CHI_SQUARE_5_DOF_AT_0_1_PERCENT
    assert len(after_accepted) == first.count(draft) > 3_000
    assert chi_square(after_accepted, torch.softmax(second_logits, 0)) < CHI_SQUARE_5_DOF_AT_0_1_PERCENT
    # Seeded: each first token is the one decoding without drafts draws.
    plain = sample_rows(reqs, first_logits.repeat(len(reqs), 1), StopConditions(set(), None),
                        ContainedFailures("test"), queues=None)
    assert first == [choice.token_id for choice in plain]
