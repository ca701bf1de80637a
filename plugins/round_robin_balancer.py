"""Load balancer ``round_robin`` (the default): each prompt to the next rank in turn.

It knows nothing of loads or caches: with prompts of even cost it spreads them
evenly, and with shared prefixes every rank ends up caching every prefix.
"""

import itertools

from tercet.plugin_api import LoadBalancer, hookimpl


class RoundRobin(LoadBalancer):
    def __init__(self, config, num_ranks):
        super().__init__(config, num_ranks)
        self.next_rank = itertools.cycle(range(num_ranks))

    def choose_rank(self, request, loads):
        return next(self.next_rank)


@hookimpl
def register_load_balancers(register):
    register("round_robin", RoundRobin)
