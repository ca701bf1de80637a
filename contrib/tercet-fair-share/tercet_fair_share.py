"""Fair share between tenants: the tenant that has been served least goes next.

Each tenant has a service account: the tokens (prompt plus the most new tokens)
of every request of theirs that was admitted, divided by the tenant's weight
(``[plugins.fair_share] weights = {tenant = weight}``, 1 for tenants not
listed). The waiting queue is dealt one request at a time to the tenant with
the smallest account, counting requests already dealt as if admitted, so with
equal requests and weights the order is round-robin, and a tenant that sent a
burst waits while the others catch up. A tenant that was idle joins level with
the least-served busy tenant (less what that tenant still has running), so it
cannot claim service for the time it sent nothing. Within a tenant, arrival order. Requests without a tenant share
tenant "default".
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from tercet.plugin_api import SchedulerView, SchedulingPolicy, hookimpl

# The tercet plugin API versions this plugin is made for (see tercet.plugin_api).
TERCET_API_VERSIONS = ">=1.0,<2"

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
        self.accounts: dict[str, float] = {}
        self.previously_waiting: dict[int, object] = {}
        self.previously_active: set[str] = set()

    def weight_of(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def order(self, waiting, view: SchedulerView):
        self._charge_admitted(waiting)
        queues: dict[str, list] = {}
        for req in sorted(waiting, key=lambda req: req.arrival_index, reverse=True):
            queues.setdefault(tenant_of(req), []).append(req)  # the earliest ends up last, popped first
        self._bring_idle_tenants_up(set(queues) | {tenant_of(req) for req in view.running}, view.running)

        heap = [(self.accounts[tenant], queue[-1].arrival_index, tenant) for tenant, queue in queues.items()]
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

    def _charge_admitted(self, waiting) -> None:
        """Requests that left the queue since the last call were admitted: charge their tenants.

        Every admission goes through ``order``, so comparing queues between calls
        sees each one (an abort of a waiting request is charged too; it is rare)."""
        waiting_now = {id(req): req for req in waiting}
        for key, req in self.previously_waiting.items():
            if key not in waiting_now:
                tenant = tenant_of(req)
                self.accounts[tenant] = self.accounts.get(tenant, 0.0) + num_tokens_in_flight(req) / self.weight_of(tenant)
        self.previously_waiting = waiting_now

    def _bring_idle_tenants_up(self, active: set[str], running) -> None:
        """A tenant becoming active starts level with the least-served busy tenant,
        not counting the work that tenant still has running."""
        running_share: dict[str, float] = {}
        for req in running:
            tenant = tenant_of(req)
            running_share[tenant] = running_share.get(tenant, 0.0) + num_tokens_in_flight(req) / self.weight_of(tenant)
        busy = [
            self.accounts[tenant] - running_share.get(tenant, 0.0)
            for tenant in active & self.previously_active if tenant in self.accounts
        ]
        floor = max(min(busy, default=0.0), 0.0)
        for tenant in active - self.previously_active:
            self.accounts[tenant] = max(self.accounts.get(tenant, 0.0), floor)
        self.previously_active = active


@hookimpl
def register_scheduling_policies(register):
    register("fair-share", FairShare)
