from tercet.config import TercetConfig
from tercet.plugins.lof_policy import LongestOutputFirst
from tercet.scheduler.policy import SchedulerView
from tercet.testing import make_request_view

NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def order(waiting):
    return [req.rid for req in LongestOutputFirst(TercetConfig()).order(waiting, NO_VIEW)]


def test_most_new_tokens_first_ties_by_arrival():
    waiting = [make_request_view("short", 0, max_new_tokens=8), make_request_view("long", 1, max_new_tokens=512), make_request_view("mid-a", 2, max_new_tokens=64), make_request_view("mid-b", 3, max_new_tokens=64)]
    assert order(waiting) == ["long", "mid-a", "mid-b", "short"]


def test_counts_what_is_left_for_a_preempted_request():
    # 100 of 128 already generated: 28 left, fewer than a fresh 64.
    waiting = [make_request_view("resumed", 0, max_new_tokens=128, output_ids=[7] * 100), make_request_view("fresh", 1, max_new_tokens=64)]
    assert order(waiting) == ["fresh", "resumed"]
