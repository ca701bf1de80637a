"""Which scheduler rank serves each completion, and the channels that reach the ranks.

With ``scheduler.dp_size`` ranks, each prompt goes to one rank, chosen by
``scheduler.load_balance``: ``round_robin`` in turn, or ``shortest_queue``,
the rank holding the fewest completions now. The router remembers the rank of
every completion in flight, so an abort reaches the rank that runs it;
control requests go to every rank.
"""

from __future__ import annotations

import itertools
from typing import Sequence

from tercet.ipc.channels import MessageSender
from tercet.ipc.messages import AbortReq


class DataParallelRouter:
    def __init__(self, senders_to_schedulers: Sequence[MessageSender], load_balance: str):
        self.senders_to_schedulers = list(senders_to_schedulers)
        self.load_balance = load_balance
        self.next_rank = itertools.cycle(range(len(self.senders_to_schedulers)))
        self.rank_of_rid: dict[str, int] = {}

    @property
    def num_ranks(self) -> int:
        return len(self.senders_to_schedulers)

    def choose_rank(self) -> int:
        if self.load_balance == "shortest_queue":
            counts = self.num_requests_per_rank()
            return min(range(len(counts)), key=counts.__getitem__)
        return next(self.next_rank)

    def send(self, message, choices: Sequence[str]) -> int:
        """Send one prompt's message to a rank, which then serves its completions ``choices``; the rank."""
        rank = self.choose_rank()
        # Remembered before sending: a send that raises still leaves them for forget() to clear.
        self.rank_of_rid.update((choice, rank) for choice in choices)
        self.senders_to_schedulers[rank].send(message)
        return rank

    def forget(self, rid: str) -> None:
        self.rank_of_rid.pop(rid, None)

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
        counts = [0] * self.num_ranks
        for rank in self.rank_of_rid.values():
            counts[rank] += 1
        return counts
