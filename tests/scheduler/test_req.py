"""A request's own state: its status and the links of an n > 1 group."""

from __future__ import annotations

from tercet.ipc.messages import FinishReason
from tercet.sampling_params import SamplingParams
from tercet.scheduler.req import Req
from tercet.scheduler.request_status import RequestStatus


def group_of(size):
    members = [Req(f"g#{index}", [1, 2, 3], SamplingParams(max_new_tokens=4, n=size), 0) for index in range(size)]
    members[0].lead(members[1:])
    return members


def test_a_new_request_is_new_and_unfinished_even_with_a_reason_set_elsewhere():
    req = Req("r", [1], SamplingParams(), 0)
    assert req.status is RequestStatus.NEW and not req.is_finished
    req.finish_reason = FinishReason("stop")  # the status, not the reason, says where it is
    assert not req.is_finished
    req.status = RequestStatus.FINISHED
    assert req.is_finished


def test_followers_wait_for_their_leader_until_released():
    leader, first, second = group_of(3)
    assert not leader.is_waiting_for_leader
    assert first.is_waiting_for_leader and second.is_waiting_for_leader
    assert leader.group == [leader, first, second]
    assert leader.release_followers() == [first, second]
    assert leader.followers == [] and not first.is_waiting_for_leader and not second.is_waiting_for_leader


def test_a_follower_that_leaves_is_no_longer_in_the_group():
    leader, first, second = group_of(3)
    first.leave_leader()
    assert leader.group == [leader, second] and not first.is_waiting_for_leader


def test_handing_over_makes_the_next_completion_lead_the_rest():
    leader, first, second = group_of(3)
    assert leader.hand_over_followers() is first
    assert leader.followers == [] and first.group == [first, second]
    assert not first.is_waiting_for_leader and second.leader is first
    assert second.hand_over_followers() is None


def test_the_repr_of_a_group_does_not_recurse():
    leader, follower = group_of(2)
    assert "g#1" in repr(leader) and repr(follower).startswith("Req(rid='g#1'")
