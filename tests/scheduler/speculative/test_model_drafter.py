"""Drafting with a model in a real scheduler: the output is the target's, the draft pool comes back."""

from __future__ import annotations

import pytest
from speculation_helpers import run_collecting

from tercet.errors import ConfigError
from tercet.sampling_params import SamplingParams
from tercet.scheduler.speculative.model_drafter import common_prefix_length
from tercet.testing.tiny_model import write_tiny_llama

PROMPTS = {"a": list(range(40, 60)), "b": [9, 9, 9, 10, 11, 9, 9], "c": list(range(300, 340))}


def greedy(max_new_tokens=20, **extra):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True, **extra)


def run(harness):
    harness.submit("a", PROMPTS["a"], greedy())
    harness.submit("b", PROMPTS["b"], greedy(speculative=False))
    harness.submit("c", PROMPTS["c"], SamplingParams(max_new_tokens=16, temperature=0.8, top_k=8, seed=5,
                                                     ignore_eos=True, return_logprob=True))
    harness.submit("d", PROMPTS["b"], greedy(max_new_tokens=12, n=2))
    return run_collecting(harness)


def drafter_of(harness):
    return harness.scheduler.model_step.speculation.proposer


@pytest.fixture
def reference(tercet_scheduler):
    return run(tercet_scheduler())


def assert_same(seen, reference):
    assert seen.keys() == reference.keys()
    for rid, expected in reference.items():
        assert seen[rid]["tokens"] == expected["tokens"], rid
        assert seen[rid]["logprobs"] == pytest.approx(expected["logprobs"], abs=1e-4), rid


def test_self_quantized_drafts_with_the_served_weights_in_four_bits_and_changes_no_token(tercet_scheduler, reference):
    harness = tercet_scheduler(settings=["speculative.proposer=self_quantized", "speculative.max_batch=8"])
    drafter = drafter_of(harness)
    assert drafter.runner.load_report.layers_by_method.get("q4_1", 0) > 0
    seen = run(harness)
    assert_same(seen, reference)
    stats = harness.scheduler.model_step.speculation.stats
    # Random weights lose much to 4 bits (a trained model's agree on about 95% of greedy tokens).
    assert stats.num_verifications > 0 and stats.num_accepted_tokens > 0
    # Every request left: the draft pool holds nothing.
    assert drafter.slots.slots == {} and drafter.slots.num_free_pages == drafter.runner.page_allocator.num_total


def test_a_draft_model_of_other_weights_changes_no_token(tercet_scheduler, reference, tercet_default_model_dir,
                                                         tmp_path):
    other = write_tiny_llama(tmp_path / "other", tercet_default_model_dir, seed=1)
    harness = tercet_scheduler(settings=["speculative.proposer=draft_model", f"speculative.draft_model={other}",
                                         "speculative.max_batch=8"])
    assert_same(run(harness), reference)
    stats = harness.scheduler.model_step.speculation.stats
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens < stats.num_draft_tokens


def test_the_served_model_as_its_own_draft_is_always_right(tercet_scheduler, reference, tercet_tiny_llama_dir):
    harness = tercet_scheduler(settings=["speculative.proposer=draft_model",
                                         f"speculative.draft_model={tercet_tiny_llama_dir}", "speculative.max_batch=8"])
    harness.submit("a", PROMPTS["a"], greedy())
    assert run_collecting(harness)["a"]["tokens"] == reference["a"]["tokens"]
    stats = harness.scheduler.model_step.speculation.stats
    # Greedy drafts of the same weights: every one is the target's choice.
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens == stats.num_draft_tokens


def test_a_small_draft_pool_drafts_for_whom_it_holds(tercet_scheduler, reference, tercet_tiny_llama_dir):
    # 48 tokens: one request's prompt and drafts at a time; the others take turns or go without.
    harness = tercet_scheduler(settings=["speculative.proposer=draft_model",
                                         f"speculative.draft_model={tercet_tiny_llama_dir}",
                                         "speculative.max_batch=8", "speculative.draft_max_total_tokens=48"])
    assert_same(run(harness), reference)
    assert harness.scheduler.model_step.speculation.stats.num_verifications > 0
    assert drafter_of(harness).slots.num_free_pages == 6


def test_a_draft_model_of_another_vocabulary_is_refused_naming_both(tercet_scheduler, tercet_default_model_dir,
                                                                    tercet_tiny_llama_dir, tmp_path):
    other = write_tiny_llama(tmp_path / "small-vocab", tercet_default_model_dir, vocab_size=1000)
    with pytest.raises(ConfigError, match="vocabulary of 1000 tokens") as raised:
        tercet_scheduler(settings=["speculative.proposer=draft_model", f"speculative.draft_model={other}"])
    assert str(other) in str(raised.value) and str(tercet_tiny_llama_dir) in str(raised.value)


def test_draft_model_needs_its_path(tercet_scheduler):
    with pytest.raises(ConfigError, match="speculative.draft_model"):
        tercet_scheduler(settings=["speculative.proposer=draft_model"])


def test_self_quantized_refuses_a_target_served_quantized(tercet_scheduler):
    with pytest.raises(ConfigError, match='model.quantization = "none"'):
        tercet_scheduler(settings=["speculative.proposer=self_quantized", "model.quantization=q8_0"])


def test_common_prefix_length():
    assert common_prefix_length((1, 2, 3), (1, 2, 3, 4)) == 3
    assert common_prefix_length((1, 2, 3, 9, 9), (1, 2, 3, 4)) == 3
    assert common_prefix_length((), (1,)) == 0
    assert common_prefix_length((5,) * 100 + (1,), (5,) * 100 + (2,)) == 100


def test_a_draft_model_that_is_no_checkpoint_is_refused_naming_its_key(tercet_scheduler, tmp_path):
    with pytest.raises(ConfigError, match=r"speculative.draft_model\) does not load: .* is not a checkpoint directory"):
        tercet_scheduler(settings=["speculative.proposer=draft_model", f"speculative.draft_model={tmp_path}"])
