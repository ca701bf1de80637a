"""Random order: a baseline for benchmarks, with nothing to exploit or starve on purpose.

``[plugins.random] seed = <int>`` makes the sequence of orders reproducible
from one run to the next; without it every scheduler draws its own. Under
tensor parallelism the seed is required: every rank of a group must order
the queue alike, or their batches, and the collectives in them, would differ.
"""

import random

from tercet.plugin_api import ConfigError, SchedulingPolicy, hookimpl


class RandomOrder(SchedulingPolicy):
    def __init__(self, config):
        super().__init__(config)
        seed = config.plugins.get("random", {}).get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"[plugins.random] seed must be an integer, got {seed!r}")
        if seed is None and config.parallel.tp_size > 1:
            raise ConfigError(
                "scheduler.policy = \"random\" needs [plugins.random] seed with parallel.tp_size > 1: "
                "every tensor-parallel rank must draw the same order"
            )
        self.random = random.Random(seed)

    def order(self, waiting, view):
        # Shuffle from arrival order, so the result depends only on the seed and
        # on which requests wait, not on how the scheduler happens to hold them.
        shuffled = sorted(waiting, key=lambda req: req.arrival_index)
        self.random.shuffle(shuffled)
        return shuffled


@hookimpl
def register_scheduling_policies(register):
    register("random", RandomOrder)
