"""Strict priority: higher ``req.priority`` first, arrival order among equals.

With ``[plugins.priority] preemption = true`` (the default) a waiting request
that does not fit may push out a running request of strictly lower priority;
equal priorities never preempt each other, so two requests cannot keep
swapping places.
"""

from tercet.plugin_api import ConfigError, SchedulingPolicy, hookimpl


class PriorityOrder(SchedulingPolicy):
    def __init__(self, config):
        super().__init__(config)
        self.is_preemption_enabled = config.plugins.get("priority", {}).get("preemption", True)
        if not isinstance(self.is_preemption_enabled, bool):
            raise ConfigError(
                f"[plugins.priority] preemption must be true or false, got {self.is_preemption_enabled!r}"
            )

    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: (-req.priority, req.arrival_index))

    def choose_preemption_victim(self, candidate, running):
        if not self.is_preemption_enabled:
            return None
        lower_priority = [req for req in running if req.priority < candidate.priority]
        if not lower_priority:
            return None
        # Among the lowest, the latest arrival gives way: it would have been
        # admitted last anyway, so earlier requests keep their place in line.
        return min(lower_priority, key=lambda req: (req.priority, -req.arrival_index))


@hookimpl
def register_scheduling_policies(register):
    register("priority", PriorityOrder)
