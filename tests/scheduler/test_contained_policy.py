"""A scheduling policy that raises or answers nonsense costs one step's order, never the scheduler."""

from __future__ import annotations

import pytest
from containment_helpers import greedy, run_to_the_end

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.scheduler.contained_policy import ContainedPolicy, arrival_order
from tercet.scheduler.policy_views import RequestView
from tercet.scheduler.req import Req


class RaisingPolicy:
    def order(self, waiting, view):
        raise RuntimeError("a bug in a plugin")

    def choose_preemption_victim(self, candidate, running):
        raise RuntimeError("another bug")


class DroppingPolicy:
    """Forgets the first waiting request and lists the last one twice."""

    def order(self, waiting, view):
        return list(waiting[1:]) + list(waiting[-1:])

    def choose_preemption_victim(self, candidate, running):
        return None


def contain(harness, policy):
    harness.scheduler.admission.policy = ContainedPolicy(policy, "test-plugin", harness.scheduler.failures)


def test_a_raising_policy_falls_back_to_arrival_order_and_is_counted(harness):
    contain(harness, RaisingPolicy())
    for rid in ("first", "second", "third"):
        harness.send(TokenizedGenerateReq(rid, [4, 5, 6], greedy(3)))
    tokens, reasons = run_to_the_end(harness)
    assert {rid: reason.kind for rid, reason in reasons.items()} == dict.fromkeys(("first", "second", "third"), "length")
    assert all(len(ids) == 3 for ids in tokens.values())
    counts = harness.scheduler.failures.as_dict()
    assert counts["by_kind"]["scheduling_policy"] >= 1
    assert counts["by_plugin"] == {"test-plugin": counts["by_kind"]["scheduling_policy"]}


def test_an_order_that_is_not_the_waiting_requests_is_not_used(harness):
    contain(harness, DroppingPolicy())
    for rid in ("a", "b"):
        harness.send(TokenizedGenerateReq(rid, [7, 8], greedy(2)))
    _, reasons = run_to_the_end(harness)
    assert set(reasons) == {"a", "b"}  # "a", which the policy dropped, still ran
    assert harness.scheduler.failures.as_dict()["by_kind"]["scheduling_policy"] >= 1


def test_a_raising_preemption_choice_preempts_nothing(harness):
    failures = harness.scheduler.failures
    policy = ContainedPolicy(RaisingPolicy(), "test-plugin", failures)
    candidate, running = (Req(rid, [1, 2], greedy(1), index) for index, rid in enumerate(("candidate", "running")))
    assert policy.choose_preemption_victim(candidate, [running]) is None
    assert failures.as_dict()["by_kind"] == {"scheduling_policy": 1}


def test_arrival_order_sorts_by_arrival_index(harness):
    harness.send(TokenizedGenerateReq("x", [1, 2], greedy(1)))
    harness.send(TokenizedGenerateReq("y", [1, 2], greedy(1)))
    harness.scheduler.queues.pause()  # keep them waiting
    harness.step()
    waiting = harness.scheduler.queues.waiting
    assert [req.rid for req in arrival_order(list(reversed(waiting)))] == ["x", "y"]


class RecordingPolicy:
    """Keeps what it was shown, and tries to change it."""

    def __init__(self):
        self.seen = []

    def order(self, waiting, view):
        self.seen.extend([*waiting, *view.running])
        return list(reversed(waiting))

    def choose_preemption_victim(self, candidate, running):
        return None


def test_a_policy_sees_read_only_views_and_its_order_is_used(harness):
    recording = RecordingPolicy()
    contain(harness, recording)
    for rid in ("first", "second"):
        harness.send(TokenizedGenerateReq(rid, [4, 5, 6], greedy(2)))
    harness.scheduler.queues.pause()
    harness.step()  # both arrive and wait
    waiting = list(harness.scheduler.queues.waiting)
    ordered = harness.scheduler.policy.order(waiting, harness.scheduler.policy.scheduler_view([], None))
    assert [req.rid for req in ordered] == ["second", "first"]  # the policy's order, as the scheduler's requests
    view = recording.seen[0]
    assert isinstance(view, RequestView) and view.input_ids == (4, 5, 6) and view.output_ids == ()
    with pytest.raises(AttributeError):
        view.priority = 5
    with pytest.raises(AttributeError):
        view.input_ids.append(7)
    # One view per request, kept while the request lives.
    assert harness.scheduler.policy.view_of(waiting[0]) is harness.scheduler.policy.view_of(waiting[0])
