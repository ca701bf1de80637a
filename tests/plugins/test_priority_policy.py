import pytest

from tercet.config import TercetConfig
from tercet.errors import ConfigError
from tercet.plugins.priority_policy import PriorityOrder
from tercet.scheduler.policy import SchedulerView
from tercet.testing import make_request_view

NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def make_policy(**options):
    return PriorityOrder(TercetConfig(plugins={"priority": options} if options else {}))


def test_higher_priority_first_ties_by_arrival():
    waiting = [make_request_view("low", 0, priority=-1), make_request_view("mid-a", 1, priority=0), make_request_view("high", 2, priority=5), make_request_view("mid-b", 3, priority=0)]
    assert [req.rid for req in make_policy().order(waiting, NO_VIEW)] == ["high", "mid-a", "mid-b", "low"]


def test_preempts_the_lowest_priority_latest_arrival():
    running = [make_request_view("one-early", 0, priority=1), make_request_view("zero-early", 1, priority=0), make_request_view("zero-late", 2, priority=0), make_request_view("two", 3, priority=2)]
    assert make_policy().choose_preemption_victim(make_request_view("urgent", 4, priority=3), running).rid == "zero-late"


def test_never_preempts_equal_or_higher_priority():
    running = [make_request_view("same", 0, priority=1), make_request_view("higher", 1, priority=2)]
    assert make_policy().choose_preemption_victim(make_request_view("candidate", 2, priority=1), running) is None
    assert make_policy().choose_preemption_victim(make_request_view("candidate", 2, priority=1), []) is None


def test_preemption_can_be_turned_off():
    running = [make_request_view("low", 0, priority=0)]
    assert make_policy(preemption=False).choose_preemption_victim(make_request_view("high", 1, priority=9), running) is None
    assert make_policy(preemption=True).choose_preemption_victim(make_request_view("high", 1, priority=9), running).rid == "low"


def test_a_preemption_option_that_is_not_a_boolean_is_named():
    with pytest.raises(ConfigError, match=r"\[plugins.priority\] preemption must be true or false"):
        make_policy(preemption="sometimes")
