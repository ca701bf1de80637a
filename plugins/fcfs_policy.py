"""First come, first served: admit waiting requests in arrival order."""

from tercet.hookspecs import hookimpl
from tercet.scheduler.policy import SchedulingPolicy


class FirstComeFirstServed(SchedulingPolicy):
    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: req.arrival_index)


@hookimpl
def register_scheduling_policies(register):
    register("fcfs", FirstComeFirstServed)
