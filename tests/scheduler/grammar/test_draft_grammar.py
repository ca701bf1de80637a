"""Drafts under an output constraint: cut to what the grammar allows, each row masked after its drafts."""

from __future__ import annotations

import json

import pytest
from speculation_helpers import Guesser, proposer_plugin, run_collecting

from tercet.model.token_bitmask import new_bitmask
from tercet.sampling_params import SamplingParams
from tercet.scheduler.grammar.draft_grammar import allowed_drafts, fill_bitmask_after, is_allowed
from tercet.scheduler.grammar.grammar_backend import GrammarMatcher

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "age"],
    "additionalProperties": False,
})
REQUESTS = {
    "json-greedy": ([5, 6, 7], {"json_schema": SCHEMA, "temperature": 0.0}),
    "json-sampled": ([5, 6, 8], {"json_schema": SCHEMA, "temperature": 1.0, "seed": 7, "return_logprob": True}),
    "regex": ([9, 10], {"regex": r"[0-9]{3}-[0-9]{2} (yes|no)", "temperature": 0.0}),
    "plain": ([11, 12, 13], {"temperature": 0.0, "ignore_eos": True}),
}


def run(harness):
    for rid, (prompt, extra) in REQUESTS.items():
        harness.submit(rid, prompt, SamplingParams(max_new_tokens=40, **extra))
    return run_collecting(harness)


class Digits(GrammarMatcher):
    """Allows the tokens 0..9 only, and keeps what it took."""

    can_roll_back = True

    def __init__(self):
        self.taken = []

    def fill_bitmask(self, bitmask, row):
        bitmask[row, 0] = (1 << 10) - 1

    def accept(self, token_id):
        self.taken.append(token_id)
        return True

    def is_complete(self):
        return False

    def rollback(self, num_tokens):
        del self.taken[len(self.taken) - num_tokens:]


def test_drafts_end_at_the_first_the_grammar_refuses_and_the_matcher_is_left_as_it_was():
    matcher = Digits()
    matcher.taken = [4]
    assert allowed_drafts(matcher, [1, 2, 30, 3], vocab_size=64) == [1, 2]
    assert matcher.taken == [4]
    bitmask = new_bitmask(1, 64)
    fill_bitmask_after(matcher, [1, 2], bitmask, 0)
    assert matcher.taken == [4] and is_allowed(bitmask, 9) and not is_allowed(bitmask, 10)


def test_bit_31_of_a_word_reads_as_set():
    bitmask = new_bitmask(1, 64)
    bitmask[0, 0] = -(1 << 31)
    assert is_allowed(bitmask, 31) and not is_allowed(bitmask, 30)


def test_constrained_requests_speculate_with_the_same_output_as_without(tercet_scheduler):
    reference = run(tercet_scheduler())
    # Right drafts but every fourth, and random ones (mostly outside the grammar) past what it knows.
    guesser = Guesser({rid: entry["tokens"] for rid, entry in reference.items()})
    shown = set()
    propose = guesser.propose
    guesser.propose = lambda requests: shown.update(req.rid for req in requests) or propose(requests)
    harness = tercet_scheduler([proposer_plugin("guess", guesser)], ["speculative.proposer=guess",
                                                                    "speculative.max_batch=8"])
    seen = run(harness)
    for rid, expected in reference.items():
        assert seen[rid]["tokens"] == expected["tokens"], rid
        assert seen[rid]["reason"] == expected["reason"], rid
        assert seen[rid]["logprobs"] == pytest.approx(expected["logprobs"], abs=1e-4), rid
    assert reference["json-greedy"]["reason"].kind == "stop"
    assert shown == set(REQUESTS)
    # Verifying drafts took fewer forwards than one token a step would.
    assert len(harness.forward_calls) < max(len(entry["tokens"]) for entry in reference.values())
