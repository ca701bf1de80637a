"""Which scheduler rank serves each completion, and the channels that reach the ranks.

With ``scheduler.dp_size`` ranks, each prompt goes to the rank the load balancer
``scheduler.load_balance`` chooses (a plugin, :mod:`tercet.frontend.load_balancer`:
``round_robin``, ``shortest_queue``, ``cache_aware`` or a third party's). The
router remembers the rank of every completion in flight, so an abort reaches the
rank that runs it, and counts them per rank: the loads the balancer sees. It
tells the balancer where each prompt went, when each completion left, and what
each rank's prefix cache evicted. The balancer is contained: a call that raises,
or a choice that names no rank, costs that prompt its choice (it goes to the
least-loaded rank) and is counted against the plugin (``kind = load_balancer``).
With one rank there is nothing to choose, and the balancer is never called.
Control requests go to every rank.
"""

from __future__ import annotations

import logging
from typing import Sequence

from tercet.containment import ContainedFailures
from tercet.frontend.load_balancer import EvictedPrefix, LoadBalancer, RoutingRequest
from tercet.ipc.channels import MessageSender
from tercet.ipc.eviction_reports import EvictedPrefixesReport
from tercet.ipc.messages import AbortReq

FAILURE_KIND = "load_balancer"


class DataParallelRouter:
    def __init__(self, senders_to_schedulers: Sequence[MessageSender], balancer: LoadBalancer,
                 failures: ContainedFailures | None = None, plugin_name: str | None = None):
        self.senders_to_schedulers = list(senders_to_schedulers)
        self.balancer = balancer
        self.failures = failures or ContainedFailures("server", logging.getLogger(__name__))
        self.plugin_name = plugin_name
        self.rank_of_rid: dict[str, int] = {}
        # Completions in flight per rank, kept with rank_of_rid: a balancer sees them on every prompt.
        self.loads = [0] * len(self.senders_to_schedulers)

    @property
    def num_ranks(self) -> int:
        return len(self.senders_to_schedulers)

    def choose_rank(self, request: RoutingRequest) -> int:
        """The balancer's rank for ``request``; the least-loaded rank where it fails."""
        loads = tuple(self.loads)
        if self.num_ranks == 1:
            return 0
        try:
            rank = self.balancer.choose_rank(request, loads)
        except Exception:
            self._record("choose_rank() raised; the prompt goes to the least-loaded rank")
            return least_loaded(loads)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            self._record(f"choose_rank() answered {rank!r}, not a rank from 0 to {self.num_ranks - 1}; "
                         "the prompt goes to the least-loaded rank", with_traceback=False)
            return least_loaded(loads)
        return rank

    def send(self, message, choices: Sequence[str]) -> int:
        """Send one prompt's message to a rank, which then serves its completions ``choices``; the rank."""
        request = RoutingRequest(getattr(message, "rid", choices[0]), getattr(message, "input_ids", ()),
                                 getattr(message, "lora_name", None), len(choices))
        rank = self.choose_rank(request)
        # Remembered before sending: a send that raises still leaves them for forget() to clear.
        for choice in choices:
            self.rank_of_rid[choice] = rank
            self.loads[rank] += 1
        self.senders_to_schedulers[rank].send(message)
        self._tell(self.balancer.routed, request, rank)
        return rank

    def forget(self, rid: str) -> None:
        rank = self.rank_of_rid.pop(rid, None)
        if rank is not None:
            self.loads[rank] -= 1
            self._tell(self.balancer.finished, rid, rank)

    def handle_eviction_report(self, report: EvictedPrefixesReport) -> None:
        """A rank's prefix cache evicted these prefixes: the balancer hears of them (a malformed report is dropped)."""
        if not (0 <= report.rank < self.num_ranks and report.is_well_formed):
            self.failures.record("eviction_report", f"dropped a malformed eviction report of rank {report.rank}",
                                 with_traceback=False)
            return
        prefixes = [EvictedPrefix(tuple(tokens), kept, lora_name)
                    for tokens, kept, lora_name in zip(report.token_ids, report.num_kept_tokens, report.lora_names)]
        self._tell(self.balancer.evicted, report.rank, prefixes)

    def abort(self, rid: str) -> bool:
        """Abort one completion where it runs; False if no rank serves it."""
        rank = self.rank_of_rid.get(rid)
        if rank is None:
            return False
        self.senders_to_schedulers[rank].send(AbortReq(rid))
        return True

    def send_to_all_ranks(self, message) -> None:
        for sender in self.senders_to_schedulers:
            sender.send(message)

    def num_requests_per_rank(self) -> list[int]:
        return list(self.loads)

    def _tell(self, method, *arguments) -> None:
        if self.num_ranks == 1:
            return  # nothing was chosen, nothing to tell
        try:
            method(*arguments)
        except Exception:
            self._record(f"{method.__name__}() raised")

    def _record(self, description: str, with_traceback: bool = True) -> None:
        self.failures.record(FAILURE_KIND, description, self.plugin_name, with_traceback)


def least_loaded(loads: Sequence[int]) -> int:
    """The rank with the fewest completions in flight (the lowest such rank on a tie)."""
    return min(range(len(loads)), key=loads.__getitem__)
