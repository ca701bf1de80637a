"""Fair share between tenants: the tenant with the fewest tokens in flight goes next.

A tenant's tokens in flight are the prompt plus the most new tokens of each of
its running requests, divided by its weight (``[plugins.fair_share] weights =
{tenant = weight}``, 1 for tenants not listed). The waiting queue is dealt one
request at a time to the tenant that is lowest, counting the requests already
dealt as if admitted, so with equal requests and weights the order is plain
round-robin, and a tenant with a lot running waits until the others catch up.
Within a tenant, arrival order. Requests without a tenant share tenant "default".
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from tercet.hookspecs import hookimpl
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy

CONFIG_TABLE = "fair_share"
DEFAULT_TENANT = "default"


def tenant_of(req) -> str:
    return req.tenant if req.tenant is not None else DEFAULT_TENANT


def num_tokens_in_flight(req) -> int:
    """What one request may hold: its prompt and every token it may still generate."""
    return len(req.input_ids) + req.sampling_params.max_new_tokens


def read_weights(options) -> dict[str, float]:
    weights = options.get("weights", {})
    if not isinstance(weights, Mapping):
        raise ValueError(f"[plugins.{CONFIG_TABLE}] weights must be a table of tenant = weight, got {weights!r}")
    for tenant, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise ValueError(f"[plugins.{CONFIG_TABLE}] weights.{tenant} must be a positive number, got {weight!r}")
    return {str(tenant): float(weight) for tenant, weight in weights.items()}


class FairShare(SchedulingPolicy):
    def __init__(self, config):
        super().__init__(config)
        self.weights = read_weights(config.plugins.get(CONFIG_TABLE, {}))

    def weight_of(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def order(self, waiting, view: SchedulerView):
        queues: dict[str, list] = {}
        for req in sorted(waiting, key=lambda req: req.arrival_index, reverse=True):
            queues.setdefault(tenant_of(req), []).append(req)  # the earliest ends up last, popped first

        share_used = {tenant: 0.0 for tenant in queues}
        for req in view.running:
            if tenant_of(req) in share_used:
                share_used[tenant_of(req)] += num_tokens_in_flight(req) / self.weight_of(tenant_of(req))

        # Ties go to the tenant whose next request arrived first.
        heap = [(share_used[tenant], queue[-1].arrival_index, tenant) for tenant, queue in queues.items()]
        heapq.heapify(heap)
        ordered = []
        while heap:
            used, _, tenant = heapq.heappop(heap)
            req = queues[tenant].pop()
            ordered.append(req)
            if queues[tenant]:
                used += num_tokens_in_flight(req) / self.weight_of(tenant)
                heapq.heappush(heap, (used, queues[tenant][-1].arrival_index, tenant))
        return ordered


@hookimpl
def register_scheduling_policies(register):
    register("fair-share", FairShare)
