"""Depth-first by weight: requests that share a cached prefix run together.

Each waiting request is placed at the radix node its prompt reaches; the tree
is walked depth first, heavier subtrees (more waiting requests) before lighter
ones, and a node's own requests follow its subtrees. So a shared prefix is
prefilled (or found in the cache) once and then reused by everything under it
while it is still cached, and the requests that share the most go first.
Without a prefix cache this is arrival order.
"""

from tercet.plugin_api import SchedulingPolicy, hookimpl


class DepthFirstByWeight(SchedulingPolicy):
    def order(self, waiting, view):
        by_arrival = sorted(waiting, key=lambda req: req.arrival_index)
        if view.prefix_cache is None:
            return by_arrival

        # Only the nodes on a path to a waiting request's node are visited, not the whole cache.
        requests_at = {}  # node -> that node's own waiting requests, in arrival order
        weight = {}  # node -> waiting requests in its subtree
        first_arrival = {}  # node -> earliest arrival in its subtree: breaks weight ties
        children_in_use = {}  # node -> {child: None} on those paths (a dict keeps them unique)
        for req in by_arrival:
            # Nodes from the root to the one whose subtree holds this prompt's cached prefix.
            path = view.prefix_cache.match(req.all_token_ids).path
            requests_at.setdefault(path[-1], []).append(req)
            for depth, node in enumerate(path):
                weight[node] = weight.get(node, 0) + 1
                first_arrival.setdefault(node, req.arrival_index)
                if depth:
                    children_in_use.setdefault(path[depth - 1], {})[node] = None

        ordered = []
        # Iterative post-order: a cache of long, branching prompts can be deeper than Python's recursion limit.
        stack = [(view.prefix_cache.root_key, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:
                ordered.extend(requests_at.get(node, []))
                continue
            stack.append((node, True))
            children = sorted(children_in_use.get(node, {}), key=lambda child: (-weight[child], first_arrival[child]))
            # Pushed lightest first, so the heaviest is popped (visited) first.
            stack.extend((child, False) for child in reversed(children))
        return ordered


@hookimpl
def register_scheduling_policies(register):
    register("dfs-weight", DepthFirstByWeight)
