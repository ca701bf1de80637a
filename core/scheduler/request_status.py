"""Where a request is in its life at the scheduler, and which moves are legal.

Every request starts NEW (made from a message, held nowhere yet). A
constrained one waits in the grammar compiler (PENDING_GRAMMAR) before it
joins the waiting queue; an admitted one RUNS with KV memory of its own until
it finishes or is retracted back to WAITING. FINISHED is for good: its last
output may still be unsent, but nothing about it changes again.

Only :class:`tercet.scheduler.request_queues.RequestQueues` moves a request
from one status to another, and it refuses a move this table does not allow:
such a move is a scheduler bug, caught where it happens rather than later as
a request that is in two places at once.
"""

from __future__ import annotations

from enum import Enum


class RequestStatus(Enum):
    NEW = "new"
    PENDING_GRAMMAR = "pending_grammar"
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"

    def can_become(self, status: "RequestStatus") -> bool:
        return status in _NEXT[self]


_NEXT: dict[RequestStatus, frozenset[RequestStatus]] = {
    # Refused or never runnable requests finish without waiting anywhere.
    RequestStatus.NEW: frozenset({RequestStatus.PENDING_GRAMMAR, RequestStatus.WAITING, RequestStatus.FINISHED}),
    # A compiled grammar joins the queue; a failed compile or an abort ends the request.
    RequestStatus.PENDING_GRAMMAR: frozenset({RequestStatus.WAITING, RequestStatus.FINISHED}),
    RequestStatus.WAITING: frozenset({RequestStatus.RUNNING, RequestStatus.FINISHED}),
    # Retraction sends a running request back to the waiting queue.
    RequestStatus.RUNNING: frozenset({RequestStatus.WAITING, RequestStatus.FINISHED}),
    RequestStatus.FINISHED: frozenset(),
}
