"""The request life cycle: which status may follow which."""

from __future__ import annotations

import pytest

from tercet.scheduler.request_status import RequestStatus

NEW, PENDING_GRAMMAR, WAITING, RUNNING, FINISHED = (
    RequestStatus.NEW, RequestStatus.PENDING_GRAMMAR, RequestStatus.WAITING, RequestStatus.RUNNING,
    RequestStatus.FINISHED,
)

LEGAL = {
    (NEW, PENDING_GRAMMAR), (NEW, WAITING), (NEW, FINISHED),
    (PENDING_GRAMMAR, WAITING), (PENDING_GRAMMAR, FINISHED),
    (WAITING, RUNNING), (WAITING, FINISHED),
    (RUNNING, WAITING), (RUNNING, FINISHED),
}


@pytest.mark.parametrize("before", list(RequestStatus))
@pytest.mark.parametrize("after", list(RequestStatus))
def test_exactly_the_life_cycle_moves_are_allowed(before, after):
    assert before.can_become(after) == ((before, after) in LEGAL)


def test_finished_is_for_good_and_everything_else_can_end():
    assert not any(FINISHED.can_become(status) for status in RequestStatus)
    assert all(status.can_become(FINISHED) for status in RequestStatus if status is not FINISHED)


def test_nothing_goes_back_to_new_or_to_the_grammar_once_queued():
    assert not any(status.can_become(NEW) for status in RequestStatus)
    assert not WAITING.can_become(PENDING_GRAMMAR) and not RUNNING.can_become(PENDING_GRAMMAR)
