"""Longest prefix match: requests with the most prompt tokens already cached go first.

Running them while their prefix is in the radix cache turns those tokens into
free prefill and keeps the prefix from being evicted before it is reused.
Without a prefix cache every request matches nothing, so this is arrival order.
"""

from tercet.plugin_api import SchedulingPolicy, hookimpl


class LongestPrefixMatch(SchedulingPolicy):
    def order(self, waiting, view):
        if view.prefix_cache is None:
            return sorted(waiting, key=lambda req: req.arrival_index)
        cached_lengths = {id(req): view.cached_prefix_length(req) for req in waiting}
        return sorted(waiting, key=lambda req: (-cached_lengths[id(req)], req.arrival_index))


@hookimpl
def register_scheduling_policies(register):
    register("lpm", LongestPrefixMatch)
