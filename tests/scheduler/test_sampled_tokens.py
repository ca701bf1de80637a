"""SampledTokens: a sampled token is appended, advances the grammar, and finishes its request when due."""

from __future__ import annotations

import pytest

from tercet.containment import ContainedFailures
from tercet.sampling_params import SamplingParams
from tercet.scheduler.req import Req
from tercet.scheduler.request_queues import RequestQueues
from tercet.scheduler.row_sampling import TokenChoice
from tercet.scheduler.sampled_tokens import SampledTokens
from tercet.scheduler.stop_conditions import StopConditions

EOS = 2


class NoKVMemory:
    def release(self, req):
        pass


class Grammar:
    """Takes the tokens in ``allowed``; complete once ``completing`` is taken."""

    def __init__(self, allowed=(5, 6), completing=6, raises=False):
        self.allowed, self.completing, self.raises = allowed, completing, raises
        self.taken = []

    def accept(self, token_id):
        if self.raises:
            raise RuntimeError("a plugin bug")
        self.taken.append(token_id)
        return token_id in self.allowed

    def is_complete(self):
        return self.taken[-1:] == [self.completing]


@pytest.fixture
def failures():
    return ContainedFailures("scheduler (test)")


@pytest.fixture
def queues():
    return RequestQueues(NoKVMemory())


@pytest.fixture
def tokens(queues, failures):
    # No stop strings below, so the stop check never decodes.
    return SampledTokens(queues, StopConditions({EOS}, tokenizer=None), failures, grammar_plugin="grammar-plugin")


def running(queues, **params):
    req = Req("r", [1, 3], SamplingParams(**{"max_new_tokens": 3, **params}), 0)
    queues.enqueue(req)
    queues.admit(req)
    return req


def test_a_token_is_appended_with_its_logprobs_and_the_request_goes_on(queues, tokens):
    req = running(queues, return_logprob=True)
    tokens.take(req, TokenChoice(7, -0.25, [(7, -0.25)]))
    assert req.output_ids == [7] and req.unsent_logprobs == [-0.25] and req.unsent_top_logprobs == [[(7, -0.25)]]
    assert not req.is_finished


def test_eos_and_length_finish_the_request(queues, tokens):
    stopped = running(queues)
    tokens.take(stopped, TokenChoice(EOS))
    assert stopped.is_finished and stopped.finish_reason.kind == "stop" and stopped.finish_reason.matched_token == EOS
    long = running(queues, max_new_tokens=2)
    for token_id in (7, 8):
        tokens.take(long, TokenChoice(token_id))
    assert long.finish_reason.kind == "length" and long.output_ids == [7, 8]


def test_a_prefill_only_request_finishes_without_a_token(queues, tokens):
    req = running(queues, max_new_tokens=0)
    tokens.take(req, TokenChoice(7))
    assert req.output_ids == [] and req.finish_reason.kind == "length"


def test_a_grammar_that_is_complete_finishes_with_stop(queues, tokens):
    req = running(queues, max_new_tokens=10)
    req.grammar = Grammar()
    tokens.take(req, TokenChoice(5))
    assert not req.is_finished
    tokens.take(req, TokenChoice(6))
    assert req.finish_reason.kind == "stop" and req.grammar.taken == [5, 6]


@pytest.mark.parametrize("grammar", [Grammar(allowed=()), Grammar(raises=True)], ids=["refused", "raised"])
def test_a_grammar_that_does_not_take_the_token_ends_only_that_request(queues, tokens, failures, grammar):
    req = running(queues, max_new_tokens=10)
    req.grammar = grammar
    tokens.take(req, TokenChoice(5))
    assert req.finish_reason.status_code == 500 and "output constraint" in req.finish_reason.message
    assert failures.as_dict()["by_plugin"] == {"grammar-plugin": 1}


def test_a_failing_stop_check_ends_the_request_with_an_internal_error(queues, tokens, failures, monkeypatch):
    req = running(queues)

    def broken(req):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a tokenizer bug")

    monkeypatch.setattr(tokens.stop_conditions, "check", broken)
    tokens.take(req, TokenChoice(7))
    assert req.output_ids == [7] and req.finish_reason.status_code == 500
    assert failures.as_dict()["by_kind"] == {"stop_check": 1}
