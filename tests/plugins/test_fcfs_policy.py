from tercet.config import TercetConfig
from tercet.sampling_params import SamplingParams
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.scheduler.req import Req
from tercet.plugins.fcfs_policy import FirstComeFirstServed


def make_req(rid, arrival_index):
    return Req(rid, [1, 2, 3], SamplingParams(), arrival_index)


def test_orders_by_arrival():
    waiting = [make_req("c", 2), make_req("a", 0), make_req("b", 1)]
    ordered = FirstComeFirstServed(TercetConfig()).order(waiting, SchedulerView(running=[], prefix_cache=None))
    assert [req.rid for req in ordered] == ["a", "b", "c"]


def test_returns_a_new_list_and_never_preempts():
    policy = FirstComeFirstServed(TercetConfig())
    waiting = [make_req("b", 1), make_req("a", 0)]
    policy.order(waiting, SchedulerView(running=[], prefix_cache=None))
    assert [req.rid for req in waiting] == ["b", "a"]
    assert isinstance(policy, SchedulingPolicy)
    assert policy.choose_preemption_victim(make_req("c", 2), [make_req("a", 0)]) is None
