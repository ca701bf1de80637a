import pytest

from tercet.config import TercetConfig
from tercet.errors import ConfigError
from tercet.sampling_params import SamplingParams
from tercet.scheduler.policy import SchedulerView
from tercet.scheduler.req import Req
from tercet.plugins.priority_policy import PriorityOrder

NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def make_req(rid, arrival_index, priority):
    return Req(rid, [1, 2, 3], SamplingParams(), arrival_index, priority=priority)


def make_policy(**options):
    return PriorityOrder(TercetConfig(plugins={"priority": options} if options else {}))


def test_higher_priority_first_ties_by_arrival():
    waiting = [make_req("low", 0, -1), make_req("mid-a", 1, 0), make_req("high", 2, 5), make_req("mid-b", 3, 0)]
    assert [req.rid for req in make_policy().order(waiting, NO_VIEW)] == ["high", "mid-a", "mid-b", "low"]


def test_preempts_the_lowest_priority_latest_arrival():
    running = [make_req("one-early", 0, 1), make_req("zero-early", 1, 0), make_req("zero-late", 2, 0), make_req("two", 3, 2)]
    assert make_policy().choose_preemption_victim(make_req("urgent", 4, 3), running).rid == "zero-late"


def test_never_preempts_equal_or_higher_priority():
    running = [make_req("same", 0, 1), make_req("higher", 1, 2)]
    assert make_policy().choose_preemption_victim(make_req("candidate", 2, 1), running) is None
    assert make_policy().choose_preemption_victim(make_req("candidate", 2, 1), []) is None


def test_preemption_can_be_turned_off():
    running = [make_req("low", 0, 0)]
    assert make_policy(preemption=False).choose_preemption_victim(make_req("high", 1, 9), running) is None
    assert make_policy(preemption=True).choose_preemption_victim(make_req("high", 1, 9), running).rid == "low"


def test_a_preemption_option_that_is_not_a_boolean_is_named():
    with pytest.raises(ConfigError, match=r"\[plugins.priority\] preemption must be true or false"):
        make_policy(preemption="sometimes")
