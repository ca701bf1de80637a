"""Depth-first by weight: requests that share a cached prefix run together.

Each waiting request is placed at the radix node its prompt reaches; the tree
is walked depth first, heavier subtrees (more waiting requests) before lighter
ones, and a node's own requests follow its subtrees. So a shared prefix is
prefilled (or found in the cache) once and then reused by everything under it
while it is still cached, and the requests that share the most go first.
Without a prefix cache this is arrival order.
"""

from tercet.hookspecs import hookimpl
from tercet.scheduler.policy import SchedulingPolicy


def deepest_node_reached(prefix_cache, token_ids):
    """The node whose subtree holds this prompt's cached prefix.

    The match stops at the last fully matched node; when the prefix goes on
    into part of a child, that child is the better home, since requests
    sharing part of one edge share more than its parent.
    """
    match = prefix_cache.match_prefix(token_ids)
    node = match.node
    depth = sum(len(ancestor.token_ids) for ancestor in ancestors_and_self(node))
    if match.num_tokens > depth:
        node = node.children[tuple(token_ids[depth:depth + prefix_cache.page_size])]
    return node


def ancestors_and_self(node):
    while node is not None:
        yield node
        node = node.parent


class DepthFirstByWeight(SchedulingPolicy):
    def order(self, waiting, view):
        by_arrival = sorted(waiting, key=lambda req: req.arrival_index)
        if view.prefix_cache is None:
            return by_arrival

        # Only the nodes on a path to a waiting request's node are visited, not the whole cache.
        requests_at = {}  # id(node) -> that node's own waiting requests, in arrival order
        weight = {}  # id(node) -> waiting requests in its subtree
        first_arrival = {}  # id(node) -> earliest arrival in its subtree: breaks weight ties
        children_in_use = {}  # id(node) -> {id(child): child} on those paths
        for req in by_arrival:
            node = deepest_node_reached(view.prefix_cache, req.all_token_ids)
            requests_at.setdefault(id(node), []).append(req)
            for ancestor in ancestors_and_self(node):
                weight[id(ancestor)] = weight.get(id(ancestor), 0) + 1
                first_arrival.setdefault(id(ancestor), req.arrival_index)
                if ancestor.parent is not None:
                    children_in_use.setdefault(id(ancestor.parent), {})[id(ancestor)] = ancestor

        ordered = []
        # Iterative post-order: a cache of long, branching prompts can be deeper than Python's recursion limit.
        stack = [(view.prefix_cache.root, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:
                ordered.extend(requests_at.get(id(node), []))
                continue
            stack.append((node, True))
            children = sorted(
                children_in_use.get(id(node), {}).values(),
                key=lambda child: (-weight[id(child)], first_arrival[id(child)]),
            )
            # Pushed lightest first, so the heaviest is popped (visited) first.
            stack.extend((child, False) for child in reversed(children))
        return ordered


@hookimpl
def register_scheduling_policies(register):
    register("dfs-weight", DepthFirstByWeight)
