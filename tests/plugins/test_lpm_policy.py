from tercet.config import TercetConfig
from tercet.plugins.lpm_policy import LongestPrefixMatch
from tercet.scheduler.policy import SchedulerView
from tercet.testing import cache_holding, make_request_view



def order(waiting, prefix_cache):
    view = SchedulerView(running=[], prefix_cache=prefix_cache)
    return [req.rid for req in LongestPrefixMatch(TercetConfig()).order(waiting, view)]


def test_longest_cached_prefix_first_ties_by_arrival():
    cache = cache_holding([1, 2, 3, 4, 5, 6, 7, 8])
    waiting = [
        make_request_view("none", 0, [9, 9, 9, 9]),
        make_request_view("four-early", 1, [1, 2, 3, 4, 5, 5]),
        make_request_view("eight", 2, [1, 2, 3, 4, 5, 6, 7, 8, 0]),
        make_request_view("two", 3, [1, 2, 0]),
        make_request_view("four-late", 4, [1, 2, 3, 4, 0]),
    ]
    assert order(waiting, cache) == ["eight", "four-early", "four-late", "two", "none"]


def test_a_resumed_request_counts_its_output_as_prefix():
    cache = cache_holding([1, 2, 3, 4, 5, 6])
    waiting = [make_request_view("fresh", 0, [1, 2, 3, 4]), make_request_view("resumed", 1, [1, 2], output_ids=[3, 4, 5, 6])]
    assert order(waiting, cache) == ["resumed", "fresh"]


def test_without_a_prefix_cache_it_is_arrival_order():
    waiting = [make_request_view("b", 1, [1, 2, 3, 4]), make_request_view("a", 0, [9]), make_request_view("c", 2, [1, 2])]
    assert order(waiting, None) == ["a", "b", "c"]
