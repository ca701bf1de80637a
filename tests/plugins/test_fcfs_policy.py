from tercet.config import TercetConfig
from tercet.plugins.fcfs_policy import FirstComeFirstServed
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.testing import make_request_view


def test_orders_by_arrival():
    waiting = [make_request_view("c", 2), make_request_view("a", 0), make_request_view("b", 1)]
    ordered = FirstComeFirstServed(TercetConfig()).order(waiting, SchedulerView(running=[], prefix_cache=None))
    assert [req.rid for req in ordered] == ["a", "b", "c"]


def test_returns_a_new_list_and_never_preempts():
    policy = FirstComeFirstServed(TercetConfig())
    waiting = [make_request_view("b", 1), make_request_view("a", 0)]
    policy.order(waiting, SchedulerView(running=[], prefix_cache=None))
    assert [req.rid for req in waiting] == ["b", "a"]
    assert isinstance(policy, SchedulingPolicy)
    assert policy.choose_preemption_victim(make_request_view("c", 2), [make_request_view("a", 0)]) is None
