"""Agreeing on settled grammar compiles across tensor-parallel ranks."""

from tercet.model.tensor_parallel import SINGLE
from tercet.scheduler.tensor_parallel_agreement import agreed_outcomes, merged_outcomes

TIMED_OUT = (400, "did not compile within grammar.compile_timeout")


def test_one_rank_acts_on_what_it_settled():
    assert agreed_outcomes(SINGLE, {"a": None, "b": TIMED_OUT}) == {"a": None, "b": TIMED_OUT}


def test_only_what_every_rank_settled_is_acted_on():
    assert merged_outcomes([{"a": None, "b": None}, {"b": None}]) == {"b": None}


def test_a_failure_on_any_rank_fails_the_request_on_all():
    merged = merged_outcomes([{"a": None, "b": (500, "backend")}, {"a": TIMED_OUT, "b": TIMED_OUT}])
    # The first failure in rank order, so every rank ends the request with the same error.
    assert merged == {"a": TIMED_OUT, "b": (500, "backend")}
