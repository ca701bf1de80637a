"""A load balancer: which data-parallel rank serves each prompt (a plugin kind, ``[scheduler] load_balance``).

The router (:class:`tercet.frontend.data_parallel_router.DataParallelRouter`) asks its balancer
for a rank for every prompt it sends, and tells it what follows: where the prompt went, when
each of its completions left, and which prefixes a rank's prefix cache evicted (the ranks
report those themselves, :mod:`tercet.ipc.eviction_reports`). A balancer lives in the API
process, one per API worker, and is called on its event loop: each call should take
microseconds and never block. The built-ins are plugins of this kind: ``round_robin``,
``shortest_queue`` and ``cache_aware``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class RoutingRequest:
    """A prompt to route: its id (its completions are ``rid`` or ``rid#i``), its tokens, the LoRA
    adapter it runs under (None: the base model; a rank caches each adapter's prefixes apart)
    and how many completions of it go to the chosen rank."""

    rid: str
    token_ids: Sequence[int]
    lora_name: str | None = None
    num_completions: int = 1


@dataclass(frozen=True)
class EvictedPrefix:
    """A rank's prefix cache dropped every cached sequence starting with ``token_ids`` (under the
    adapter ``lora_name``); it still holds their first ``num_kept_tokens`` tokens, as far as this
    eviction goes. ``token_ids`` ends with the first page the rank dropped, so two cached
    sequences that part within that page are both covered: a balancer may forget both."""

    token_ids: tuple[int, ...]
    num_kept_tokens: int
    lora_name: str | None = None


class LoadBalancer(ABC):
    """Chooses a rank for each prompt. ``loads[rank]``, in every call that has it, is the number
    of completions this API worker has in flight on that rank (sent, not yet finished)."""

    def __init__(self, config, num_ranks: int):
        self.config = config  # the whole TercetConfig; a balancer's options are config.plugins[<its name>]
        self.num_ranks = num_ranks

    @abstractmethod
    def choose_rank(self, request: RoutingRequest, loads: Sequence[int]) -> int:
        """The rank, ``0 <= rank < num_ranks``, to send ``request`` to."""

    def routed(self, request: RoutingRequest, rank: int) -> None:
        """``request`` was sent to ``rank`` (the rank chosen, or the router's fallback)."""

    def finished(self, rid: str, rank: int) -> None:
        """Completion ``rid`` on ``rank`` left this API worker: finished, aborted or failed."""

    def evicted(self, rank: int, prefixes: Sequence[EvictedPrefix]) -> None:
        """``rank``'s prefix cache evicted ``prefixes`` (reported between its steps, in batches)."""
