"""First come, first served: admit waiting requests in arrival order."""

from tercet.plugin_api import SchedulingPolicy, hookimpl


class FirstComeFirstServed(SchedulingPolicy):
    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: req.arrival_index)


@hookimpl
def register_scheduling_policies(register):
    register("fcfs", FirstComeFirstServed)
