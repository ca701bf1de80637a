from tercet.config import TercetConfig
from tercet.plugins.dfs_weight_policy import DepthFirstByWeight
from tercet.scheduler.policy import SchedulerView
from tercet.testing import cache_holding, make_request_view

SHARED = [1, 2, 3, 4]
BRANCH_X = SHARED + [5, 6, 5, 6]
BRANCH_Y = SHARED + [7, 8, 7, 8]
OTHER = [20, 21, 22, 23]
# Holding BRANCH_X, BRANCH_Y and OTHER, the cache's tree is: root -> SHARED -> {x, y}, and root -> OTHER.


def order(waiting, prefix_cache):
    view = SchedulerView(running=[], prefix_cache=prefix_cache)
    return [req.rid for req in DepthFirstByWeight(TercetConfig()).order(waiting, view)]


def test_heavier_subtrees_first_and_a_node_after_its_subtrees():
    cache = cache_holding(BRANCH_X, BRANCH_Y, OTHER)
    waiting = [
        make_request_view("other", 0, OTHER + [1]),
        make_request_view("x", 1, BRANCH_X + [9]),
        make_request_view("y-early", 2, BRANCH_Y + [9]),
        make_request_view("shared-only", 3, SHARED + [9, 9]),
        make_request_view("y-partly", 4, SHARED + [7, 8, 0, 0]),  # reaches into y's edge without covering it
        make_request_view("uncached", 5, [50, 51]),
        make_request_view("y-late", 6, BRANCH_Y),
    ]
    # SHARED holds 5 waiting requests (y: 3, x: 1, itself: 1), OTHER 1, the root itself 1.
    assert order(waiting, cache) == ["y-early", "y-partly", "y-late", "x", "shared-only", "other", "uncached"]


def test_equal_weights_go_by_earliest_arrival_in_the_subtree():
    cache = cache_holding(BRANCH_X, BRANCH_Y)
    waiting = [make_request_view("x", 1, BRANCH_X), make_request_view("y", 0, BRANCH_Y), make_request_view("x-again", 2, BRANCH_X)]
    assert order(waiting, cache) == ["x", "x-again", "y"]
    waiting = [make_request_view("x", 1, BRANCH_X), make_request_view("y", 0, BRANCH_Y)]
    assert order(waiting, cache) == ["y", "x"]


def test_ordering_leaves_the_tree_as_it_was():
    cache = cache_holding(BRANCH_X, BRANCH_Y)
    (shared,) = cache.root.children.values()
    edges_before = sorted(child.token_ids for child in shared.children.values())
    order([make_request_view("y-partly", 0, SHARED + [7, 8, 0, 0])], cache)
    assert [node.token_ids for node in cache.root.children.values()] == [tuple(SHARED)]
    assert sorted(child.token_ids for child in shared.children.values()) == edges_before


def test_without_a_prefix_cache_it_is_arrival_order():
    waiting = [make_request_view("b", 1, BRANCH_X), make_request_view("a", 0, OTHER), make_request_view("c", 2, BRANCH_X)]
    assert order(waiting, None) == ["a", "b", "c"]
