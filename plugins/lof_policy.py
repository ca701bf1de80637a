"""Longest output first: requests that may still generate the most tokens go first.

Starting the long generations early keeps them from becoming a tail that runs
alone at the end of a burst, when the batch has little else to share the step
with.
"""

from tercet.plugin_api import SchedulingPolicy, hookimpl


def num_tokens_left_to_generate(req) -> int:
    # A preempted request comes back with part of its output already made.
    return max(req.sampling_params.max_new_tokens - len(req.output_ids), 0)


class LongestOutputFirst(SchedulingPolicy):
    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: (-num_tokens_left_to_generate(req), req.arrival_index))


@hookimpl
def register_scheduling_policies(register):
    register("lof", LongestOutputFirst)
