"""The cache_aware balancer's approximate radix tree: match, insert, the token budget, and forgetting what a rank evicted."""

from __future__ import annotations

import random
from array import array

from tercet.plugins.cache_aware_balancer.approximate_tree import ApproximateRadixTree, common_prefix_length


def held(tree: ApproximateRadixTree, namespace=None) -> list[tuple[int, ...]]:
    """Every sequence the tree holds whole, root to leaf."""
    sequences, stack = [], [(tree.roots[namespace], ())] if namespace in tree.roots else []
    while stack:
        node, above = stack.pop()
        path = above + tuple(node.tokens)
        if not node.children and node.parent is not None:
            sequences.append(path)
        stack.extend((child, path) for child in node.children.values())
    return sorted(sequences)


def test_match_is_the_longest_prefix_held_and_changes_nothing():
    tree = ApproximateRadixTree(max_tokens=1000)
    tree.insert([1, 2, 3, 4, 5])
    tree.insert([1, 2, 9])
    assert [tree.match(tokens) for tokens in ([1, 2, 3, 4, 5, 6], [1, 2, 9], [1, 2, 8], [7], [])] == [5, 3, 2, 0, 0]
    assert held(tree) == [(1, 2, 3, 4, 5), (1, 2, 9)] and tree.num_tokens == 6  # [1, 2] once, split


def test_each_adapter_has_its_own_tree():
    tree = ApproximateRadixTree(max_tokens=1000)
    tree.insert([1, 2, 3], "adapter")
    assert tree.match([1, 2, 3]) == 0 and tree.match([1, 2, 3], "adapter") == 3


def test_inserting_what_is_held_adds_nothing():
    tree = ApproximateRadixTree(max_tokens=1000)
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2])
    tree.insert([1, 2, 3, 4])
    assert tree.num_tokens == 4 and tree.match([1, 2, 3, 4]) == 4


def test_past_its_budget_the_least_recently_routed_leaves_go_down_to_nine_tenths():
    tree = ApproximateRadixTree(max_tokens=100)
    for start in range(0, 100, 20):  # five prompts of 20 tokens: the budget, full
        tree.insert(list(range(start, start + 20)))
    tree.insert(list(range(0, 20)))  # the oldest is used again
    tree.insert(list(range(200, 220)))  # 120 tokens: down to 90 at most, the least recently used first
    assert tree.num_tokens == 80
    assert tree.match(list(range(20, 40))) == 0 and tree.match(list(range(40, 60))) == 0
    assert tree.match(list(range(0, 20))) == 20 and tree.match(list(range(200, 220))) == 20


def test_eviction_goes_up_a_branch_whose_leaves_are_gone():
    tree = ApproximateRadixTree(max_tokens=30)
    tree.insert([1] * 10 + [2] * 5)
    tree.insert([1] * 10 + [3] * 5)
    tree.insert(list(range(100, 110)))
    tree.insert(list(range(200, 210)))  # 40 tokens: the [1]*10 branch, least recently used, goes whole
    assert held(tree) == [tuple(range(100, 110)), tuple(range(200, 210))] and tree.num_tokens == 20


def test_forgetting_cuts_what_extends_the_kept_part_mid_edge_or_at_a_node():
    tree = ApproximateRadixTree(max_tokens=1000)
    system = list(range(100, 132))
    tree.insert(system + [1, 1, 1])
    tree.insert(system + [2, 2, 2])
    tree.insert([7, 7, 7])
    # The rank dropped the [1, ...] branch after the system prompt: a node's start.
    assert tree.forget(system + [1, 1], 32) == 3
    assert held(tree) == [(7, 7, 7), tuple(system + [2, 2, 2])]
    # Then everything past the system prompt's first 16 tokens: mid-edge, with what hangs below.
    assert tree.forget(system[:20], 16) == 16 + 3
    assert tree.match(system + [2]) == 16 and tree.num_tokens == 16 + 3


def test_forgetting_what_the_tree_does_not_hold_changes_nothing():
    tree = ApproximateRadixTree(max_tokens=1000)
    tree.insert([1, 2, 3, 4])
    assert tree.forget([1, 2, 9, 9], 2) == 0  # another branch
    assert tree.forget([1, 2, 3, 4, 5, 6], 4) == 0  # past what is held
    assert tree.forget([5], 0, "adapter") == 0
    assert held(tree) == [(1, 2, 3, 4)]


def test_the_common_prefix_of_an_edge_and_the_tokens_from_an_offset():
    rng = random.Random(0)
    for _ in range(300):
        edge = array("i", [rng.randrange(3) for _ in range(rng.randrange(1, 40))])
        tokens = array("i", [rng.randrange(3) for _ in range(rng.randrange(0, 60))])
        start = rng.randrange(len(tokens) + 1)
        expected = 0
        while expected < len(edge) and start + expected < len(tokens) and edge[expected] == tokens[start + expected]:
            expected += 1
        assert common_prefix_length(edge, tokens, start) == expected


def test_random_inserts_match_a_set_of_the_sequences_held():
    rng = random.Random(1)
    tree, inserted = ApproximateRadixTree(max_tokens=10**6), []
    for _ in range(200):
        base = rng.choice(inserted) if inserted and rng.random() < 0.7 else ()
        sequence = tuple(base[:rng.randrange(len(base) + 1)]) + tuple(rng.randrange(4) for _ in range(rng.randrange(1, 9)))
        tree.insert(list(sequence))
        inserted.append(sequence)
        probe = rng.choice(inserted)[:rng.randrange(1, 12)] + (rng.randrange(4),)
        best = max(next((i for i, (a, b) in enumerate(zip(seq, probe)) if a != b), min(len(seq), len(probe)))
                   for seq in inserted)
        assert tree.match(list(probe)) == best
