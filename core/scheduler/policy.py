"""The scheduling-policy interface: small enough to implement in one file.

A policy decides the order in which waiting requests are tried for admission
(the scheduler admits in that order while KV memory and the batch cap allow,
and stops at the first that does not fit), and may name a running request to
preempt for a waiting one. Policies are registered through
``register_scheduling_policies`` and chosen by ``[scheduler] policy``; the
factory receives the whole resolved config, so a plugin reads its own options
from ``config.plugins[<its name>]``. A policy sees requests as read-only
:class:`RequestView`s and the prefix cache as a :class:`PrefixCacheView`,
never the scheduler's own objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from tercet.scheduler.policy_views import PrefixCacheView, RequestView


@dataclass(frozen=True)
class SchedulerView:
    """What a policy may look at besides the waiting queue (read only)."""

    # The running requests, as RequestViews.
    running: Sequence[RequestView]
    # The prefix cache as a PrefixCacheView, or None when [cache] prefix_cache is off.
    # (A RadixCache given here is wrapped in its view.)
    prefix_cache: PrefixCacheView | None

    def __post_init__(self):
        if self.prefix_cache is not None and not isinstance(self.prefix_cache, PrefixCacheView):
            object.__setattr__(self, "prefix_cache", PrefixCacheView(self.prefix_cache))

    def cached_prefix_length(self, req: RequestView) -> int:
        """How many leading tokens of the request would come from the prefix cache if admitted now."""
        if self.prefix_cache is None:
            return 0
        # Admission matches all but the last token (at least one is always fed).
        return self.prefix_cache.match(req.all_token_ids[:-1]).num_tokens


class SchedulingPolicy(ABC):
    def __init__(self, config):
        self.config = config

    @abstractmethod
    def order(self, waiting: Sequence[RequestView], view: SchedulerView) -> list[RequestView]:
        """The waiting requests (all of them, each once) in the order to try admitting them."""

    def choose_preemption_victim(self, candidate: RequestView, running: Sequence[RequestView]) -> RequestView | None:
        """A running request to send back to the waiting queue so ``candidate`` can run, or None.

        Called when ``candidate`` (the first request in ``order``) does not fit.
        The victim keeps its output so far and resumes later. Default: never preempt.
        """
        return None
