"""A scheduling policy behind a wall: it sees views, and its failures cost one step's order.

A policy is a plugin. It gets read-only :class:`RequestView`s of the waiting
and running requests (one per request, kept while the request lives) and
answers with views, which are mapped back to the scheduler's requests here.
A plugin's bug must not end the process that runs every user's requests:
when ``order()`` raises, or answers something other than each waiting request
exactly once, that step admits in arrival order; when
``choose_preemption_victim()`` raises, nothing is preempted. Each such failure
is counted against the plugin (``kind = scheduling_policy``).
"""

from __future__ import annotations

from typing import Sequence
from weakref import WeakKeyDictionary

from tercet.containment import ContainedFailures
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.scheduler.policy_views import RequestView
from tercet.scheduler.req import Req


class ContainedPolicy:
    def __init__(self, policy: SchedulingPolicy, plugin_name: str, failures: ContainedFailures):
        self.policy = policy
        self.plugin_name = plugin_name
        self.failures = failures
        # Each request's view, made once: a policy may keep per-request state keyed by its view.
        self.views: WeakKeyDictionary[Req, RequestView] = WeakKeyDictionary()

    def view_of(self, req: Req) -> RequestView:
        view = self.views.get(req)
        if view is None:
            view = self.views[req] = RequestView(req)
        return view

    def scheduler_view(self, running: Sequence[Req], prefix_cache) -> SchedulerView:
        return SchedulerView(running=tuple(self.view_of(req) for req in running), prefix_cache=prefix_cache)

    def order(self, waiting: Sequence[Req], view: SchedulerView) -> list[Req]:
        reqs_by_view = {id(self.view_of(req)): req for req in waiting}
        try:
            ordered = list(self.policy.order([self.view_of(req) for req in waiting], view))
        except Exception:
            self._record("order() raised; this step admits in arrival order")
            return arrival_order(waiting)
        reqs = [reqs_by_view.get(id(request_view)) for request_view in ordered]
        if len(reqs) != len(waiting) or None in reqs or len({id(req) for req in reqs}) != len(waiting):
            self._record(
                f"order() returned {len(ordered)} entries that are not the {len(waiting)} waiting requests, "
                "each once; this step admits in arrival order",
                with_traceback=False,
            )
            return arrival_order(waiting)
        return reqs

    def choose_preemption_victim(self, candidate: Req, running: Sequence[Req]) -> Req | None:
        reqs_by_view = {id(self.view_of(req)): req for req in running}
        try:
            victim = self.policy.choose_preemption_victim(self.view_of(candidate), [self.view_of(req) for req in running])
        except Exception:
            self._record("choose_preemption_victim() raised; nothing is preempted")
            return None
        return None if victim is None else reqs_by_view.get(id(victim))

    def _record(self, what: str, with_traceback: bool = True) -> None:
        self.failures.record(
            "scheduling_policy", f"{type(self.policy).__name__}.{what}",
            plugin=self.plugin_name, with_traceback=with_traceback,
        )


def arrival_order(waiting: Sequence[Req]) -> list[Req]:
    return sorted(waiting, key=lambda req: req.arrival_index)
