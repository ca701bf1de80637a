"""A scheduling policy behind a wall: its failures cost one step's order, never the scheduler.

A policy is a plugin, and a plugin's bug must not end the process that runs
every user's requests. When ``order()`` raises, or answers something other
than each waiting request exactly once, that step admits in arrival order;
when ``choose_preemption_victim()`` raises, nothing is preempted. Each such
failure is counted against the plugin (``kind = scheduling_policy``).
"""

from __future__ import annotations

from typing import Sequence

from tercet.containment import ContainedFailures
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.scheduler.req import Req


class ContainedPolicy:
    def __init__(self, policy: SchedulingPolicy, plugin_name: str, failures: ContainedFailures):
        self.policy = policy
        self.plugin_name = plugin_name
        self.failures = failures

    def order(self, waiting: Sequence[Req], view: SchedulerView) -> list[Req]:
        try:
            ordered = list(self.policy.order(list(waiting), view))
        except Exception:
            self._record("order() raised; this step admits in arrival order")
            return arrival_order(waiting)
        if len(ordered) != len(waiting) or {id(req) for req in ordered} != {id(req) for req in waiting}:
            self._record(
                f"order() returned {len(ordered)} entries that are not the {len(waiting)} waiting requests, each once; this step admits in arrival order",
                with_traceback=False,
            )
            return arrival_order(waiting)
        return ordered

    def choose_preemption_victim(self, candidate: Req, running: Sequence[Req]) -> Req | None:
        try:
            return self.policy.choose_preemption_victim(candidate, running)
        except Exception:
            self._record("choose_preemption_victim() raised; nothing is preempted")
            return None

    def _record(self, what: str, with_traceback: bool = True) -> None:
        self.failures.record(
            "scheduling_policy", f"{type(self.policy).__name__}.{what}",
            plugin=self.plugin_name, with_traceback=with_traceback,
        )


def arrival_order(waiting: Sequence[Req]) -> list[Req]:
    return sorted(waiting, key=lambda req: req.arrival_index)
