"""Load balancer ``shortest_queue``: each prompt to the rank with the fewest completions in flight.

The loads are this API worker's own (what it sent and has not seen finish); ties go to
the lowest rank. It follows uneven request costs that ``round_robin`` ignores, and like
it knows nothing of what each rank caches.
"""

from tercet.plugin_api import LoadBalancer, hookimpl


class ShortestQueue(LoadBalancer):
    def choose_rank(self, request, loads):
        return min(range(len(loads)), key=loads.__getitem__)


@hookimpl
def register_load_balancers(register):
    register("shortest_queue", ShortestQueue)
