"""First come, first served: admit waiting requests in arrival order."""

from tercet.hookspecs import hookimpl


class FirstComeFirstServed:
    def __init__(self, scheduler_config):
        self.scheduler_config = scheduler_config

    def order(self, waiting):
        return sorted(waiting, key=lambda req: req.arrival_index)


@hookimpl
def register_scheduling_policies(register):
    register("fcfs", FirstComeFirstServed)
