"""One rank's cached prefixes as an API worker guesses them: a radix tree of token ids under a token budget.

The worker inserts every prompt it routes to the rank, so the tree holds what the rank
was sent; the rank's own eviction reports cut out what it dropped (:meth:`forget`), and
past ``max_tokens`` the least recently routed leaves go first, down to nine tenths of the
budget, so the cost of finding them is paid once per tenth. Edges are ``array('i')``
(4 bytes a token) and are compared a slice at a time, in C. Like the rank's cache, the
tree keeps one root per LoRA adapter: a prefix cached under one is not under another.
"""

from __future__ import annotations

import heapq
import itertools
import struct
from array import array

# After an eviction the tree holds this much of its budget.
LOW_WATER = 0.9


class Node:
    __slots__ = ("parent", "tokens", "children", "last_use")

    def __init__(self, parent: Node | None, tokens: array, last_use: int = 0):
        self.parent = parent
        self.tokens = tokens
        self.children: dict[int, Node] = {}
        self.last_use = last_use


def as_tokens(token_ids) -> array:
    """Token ids as the tree holds and compares them. (Packed by struct first: array("i", a_list)
    converts each id on its own and takes twice as long, the most of a prompt's routing cost.)"""
    if isinstance(token_ids, array):
        return token_ids
    return array("i", struct.pack(f"{len(token_ids)}i", *token_ids))


def common_prefix_length(edge: array, tokens: array, start: int) -> int:
    """How many leading tokens of ``edge`` equal ``tokens[start:]``'s (slices compared in C, by bisection)."""
    length = min(len(edge), len(tokens) - start)
    if edge[:length] == tokens[start:start + length]:
        return length
    matched, unmatched = 0, length  # edge[:matched] matches, edge[:unmatched] does not
    while unmatched - matched > 1:
        middle = (matched + unmatched) // 2
        if edge[matched:middle] == tokens[start + matched:start + middle]:
            matched = middle
        else:
            unmatched = middle
    return matched


class ApproximateRadixTree:
    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.roots: dict[str | None, Node] = {}
        self.num_tokens = 0
        self.clock = itertools.count(1)

    def _walk(self, root: Node, tokens: array) -> tuple[list[tuple[Node, int]], int]:
        """The nodes the longest match of ``tokens`` passes, each with the depth it starts at; the match's length."""
        path, node, depth = [], root, 0
        while depth < len(tokens):
            child = node.children.get(tokens[depth])
            if child is None:
                break
            matched = common_prefix_length(child.tokens, tokens, depth)
            path.append((child, depth))
            depth += matched
            if matched < len(child.tokens):
                break
            node = child
        return path, depth

    def match(self, token_ids, namespace: str | None = None) -> int:
        """How many leading tokens of ``token_ids`` the rank is thought to hold (nothing changes)."""
        root = self.roots.get(namespace)
        return 0 if root is None else self._walk(root, as_tokens(token_ids))[1]

    def insert(self, token_ids, namespace: str | None = None) -> None:
        """The rank was sent ``token_ids``: it holds them now, most recently used."""
        tokens = as_tokens(token_ids)
        root = self.roots.get(namespace)
        if root is None:
            root = self.roots[namespace] = Node(None, array("i"))
        path, depth = self._walk(root, tokens)
        now = next(self.clock)
        node = root
        for node, start in path:
            node.last_use = now
        if path and depth < start + len(node.tokens):
            node = self._split(node, depth - start)
        if depth < len(tokens):
            leaf = Node(node, tokens[depth:], now)
            node.children[tokens[depth]] = leaf
            self.num_tokens += len(leaf.tokens)
        if self.num_tokens > self.max_tokens:
            self.evict(int(self.max_tokens * LOW_WATER))

    def _split(self, node: Node, length: int) -> Node:
        """Cut ``node`` after its first ``length`` tokens; the new upper part."""
        upper = Node(node.parent, node.tokens[:length], node.last_use)
        node.parent.children[node.tokens[0]] = upper
        node.tokens, node.parent = node.tokens[length:], upper
        upper.children[node.tokens[0]] = node
        return upper

    def forget(self, token_ids, num_kept_tokens: int, namespace: str | None = None) -> int:
        """The rank dropped every cached sequence starting with ``token_ids``, keeping their first
        ``num_kept_tokens``: cut what the tree holds past those along this path; how many tokens went."""
        root = self.roots.get(namespace)
        tokens = as_tokens(token_ids)[:num_kept_tokens + 1]
        if root is None or self._walk(root, tokens)[1] < len(tokens):
            return 0  # the tree holds nothing that extends the kept part along this path
        path, _ = self._walk(root, tokens)
        node, start = next((node, start) for node, start in path if start + len(node.tokens) > num_kept_tokens)
        if start == num_kept_tokens:  # the cut falls on a node's start: the node and all below it go
            del node.parent.children[node.tokens[0]]
            return self._drop_subtree(node, len(node.tokens))
        kept_here = num_kept_tokens - start
        dropped = self._drop_subtree(node, len(node.tokens) - kept_here)
        node.tokens = node.tokens[:kept_here]
        node.children = {}
        return dropped

    def _drop_subtree(self, top: Node, own_tokens: int) -> int:
        """Uncount ``own_tokens`` of ``top`` and every token below it; how many."""
        dropped, stack = own_tokens, list(top.children.values())
        while stack:
            node = stack.pop()
            dropped += len(node.tokens)
            stack.extend(node.children.values())
        self.num_tokens -= dropped
        return dropped

    def evict(self, max_tokens: int) -> None:
        """Drop least recently used leaves until at most ``max_tokens`` are held."""
        order = itertools.count()
        leaves = [(node.last_use, next(order), node) for node in self._leaves()]
        heapq.heapify(leaves)
        while self.num_tokens > max_tokens and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            del parent.children[leaf.tokens[0]]
            self.num_tokens -= len(leaf.tokens)
            if not parent.children and parent.parent is not None:
                heapq.heappush(leaves, (parent.last_use, next(order), parent))

    def _leaves(self) -> list[Node]:
        leaves, stack = [], list(self.roots.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.parent is not None:
                leaves.append(node)
        return leaves
