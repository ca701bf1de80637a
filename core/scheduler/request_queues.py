"""The scheduler's requests and their counters, with one owner.

Every move of a request (into the waiting queue, into the running batch, back
to waiting, out for good) is a verb here, and each checks it against
:class:`RequestStatus`: a move the life cycle does not allow raises
:class:`IllegalTransition` instead of leaving a request in two places. The
other parts of the scheduler read :attr:`waiting` and :attr:`running` as
tuples and change them only through these verbs.

A waiting entry is a group leader: the other completions of an n > 1 request
wait inside it (``leader.followers``) and are admitted with it. Finishing a
request frees its KV memory and queues its last output for the next send.

Embedding inputs wait here too, in a queue of their own (they hold no KV
memory while they wait and never join the running batch: each batch runs in
one forward, :mod:`tercet.scheduler.embeddings`); an abort finds them as it
finds completions, and their results wait here for the next send as well.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING

from tercet.ipc.messages import FinishReason
from tercet.scheduler.req import EmbeddingReq, Req
from tercet.scheduler.request_status import RequestStatus
from tercet.scheduler.request_times import RequestTimes

if TYPE_CHECKING:
    from tercet.scheduler.kv_memory import RequestKVMemory

logger = logging.getLogger(__name__)
# A row of the next BatchEmbeddingOutput: (rid, vector bytes, prompt tokens, refusal).
EmbeddingRow = tuple[str, bytes, int, FinishReason | None]
WAITING, RUNNING, FINISHED = RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.FINISHED


class IllegalTransition(RuntimeError):
    """A request was asked to move where its status does not allow: a scheduler bug."""


class RequestQueues:
    def __init__(self, kv_memory: "RequestKVMemory"):
        # Finishing and retracting give a request's KV memory back.
        self.kv_memory = kv_memory
        self._waiting: list[Req] = []
        self._running: list[Req] = []
        # Finished requests whose last output has not been sent yet.
        self._finished_unsent: list[Req] = []
        self._arrival_counter = itertools.count()
        # Seconds each completion spent waiting, prefilling and decoding (published at /metrics).
        self.times = RequestTimes()
        self._num_retractions = 0
        self._num_prompt_tokens_admitted = 0
        self._num_prompt_tokens_from_cache = 0
        self._is_paused = False
        self._waiting_embeddings: deque[EmbeddingReq] = deque()
        self._embeddings_unsent: list[EmbeddingRow] = []

    # -- what is where (read only) ----------------------------------------

    @property
    def waiting(self) -> tuple[Req, ...]:
        """Group leaders waiting to be admitted, oldest entry first."""
        return tuple(self._waiting)

    @property
    def running(self) -> tuple[Req, ...]:
        return tuple(self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Completions waiting (the n of a request each count)."""
        return sum(len(leader.group) for leader in self._waiting)

    @property
    def waiting_embeddings(self) -> tuple[EmbeddingReq, ...]:
        """Embedding inputs waiting for a step, oldest first."""
        return tuple(self._waiting_embeddings)

    @property
    def num_waiting_embeddings(self) -> int:
        return len(self._waiting_embeddings)

    @property
    def num_in_flight(self) -> int:
        return len(self._running) + self.num_waiting

    @property
    def has_requests(self) -> bool:
        return bool(self._running or self._waiting)

    @property
    def num_retractions(self) -> int:
        return self._num_retractions

    @property
    def num_prompt_tokens_admitted(self) -> int:
        """Prompt tokens of requests at their first admission."""
        return self._num_prompt_tokens_admitted

    @property
    def num_prompt_tokens_from_cache(self) -> int:
        """Of those, the ones found in the prefix cache."""
        return self._num_prompt_tokens_from_cache

    @property
    def is_paused(self) -> bool:
        """Generation is paused: no request is admitted or stepped until :meth:`resume`."""
        return self._is_paused

    def next_arrival_index(self) -> int:
        return next(self._arrival_counter)

    # -- verbs --------------------------------------------------------------

    def hold_for_grammar(self, group: list[Req]) -> None:
        """The group waits for its output constraint to compile (the grammar compiler holds it)."""
        for req in group:
            self._become(req, RequestStatus.PENDING_GRAMMAR)

    def enqueue(self, leader: Req) -> None:
        """A new (or just compiled) request and its followers join the waiting queue."""
        for req in leader.group:
            self._become(req, WAITING)
        self._waiting.append(leader)

    def admit(self, leader: Req, left_behind: list[Req] = ()) -> None:
        """The waiting group joins the running batch (its KV memory already given).

        ``left_behind`` are followers with no room for a copy of the prompt:
        they stay waiting, each on its own, and prefill alone later.
        """
        self._check(leader, WAITING)
        self._waiting.remove(leader)
        for follower in left_behind:
            follower.leave_leader()
            self._waiting.append(follower)
        for req in leader.group:
            self._become(req, RUNNING)
            self._running.append(req)
        if leader.num_retractions == 0:
            self.times.admitted(leader.group)
            self._num_prompt_tokens_admitted += len(leader.input_ids)
            self._num_prompt_tokens_from_cache += leader.num_prefix_cache_hits or 0

    def start_followers(self, leader: Req) -> list[Req]:
        """The leader's prompt is computed: its followers go on alone from here (they are returned)."""
        self._check(leader, RUNNING)
        return leader.release_followers()

    def retract(self, req: Req) -> None:
        """Send a running request (and any followers waiting on it) back to the waiting queue,
        with its output so far; its KV memory is given back."""
        if req.is_waiting_for_leader:
            raise IllegalTransition(f"request {req.rid!r} waits for its leader: it moves only with it")
        for member in req.group:
            self._become(member, WAITING)
            self.kv_memory.release(member)
            self._running.remove(member)
        if req.prompt_logprobs is not None and len(req.prompt_logprobs.token_ids) < len(req.input_ids):
            req.prompt_logprobs = None  # recomputed from the start when it resumes
        req.num_retractions += 1
        self._num_retractions += 1
        self._waiting.append(req)
        logger.info(
            "retracted request %s (%d tokens) to free KV memory; %d retractions so far",
            req.rid, req.num_tokens, self._num_retractions,
        )

    def finish(self, req: Req, reason: FinishReason) -> None:
        """End one request with ``reason``, wherever it is; the rest of its group goes on."""
        was = req.status
        self._become(req, FINISHED)
        self._leave(req, was)
        self._end(req, reason)

    def fail(self, req: Req, reason: FinishReason) -> None:
        """End a request whose own part of a step failed, and the completions still waiting on its prompt."""
        for follower in list(req.followers):
            self.finish(follower, reason)
        self.finish(req, reason)

    def abort(self, rid: str, reason: FinishReason) -> bool:
        """End the running or waiting completion ``rid``, and any waiting embedding input ``rid``
        (once running, an input finishes within its step); False when there is none here."""
        found_completion = self._abort_completion(rid, reason)
        found_embedding = self._abort_waiting_embeddings(rid, reason)
        return found_completion or found_embedding

    def abort_all(self, reason: FinishReason) -> list[Req | EmbeddingReq]:
        """End every running and waiting request, then every waiting embedding input; they are returned."""
        victims = [*self._running, *(req for leader in self._waiting for req in leader.group)]
        self._running, self._waiting = [], []
        for req in victims:
            self._become(req, FINISHED)
            req.followers, req.leader = [], None
            self._end(req, reason)
        embeddings, self._waiting_embeddings = list(self._waiting_embeddings), deque()
        for req in embeddings:
            self.end_embedding(req, refusal=reason)
        return [*victims, *embeddings]

    def fail_in_this_output(self, req: Req, reason: FinishReason) -> None:
        """``req``'s output could not be built or sent: it ends with ``reason``, which
        the output being sent now carries (so it is not queued for a later one).
        A request already finished gets ``reason`` instead of its own."""
        if req.is_finished:
            req.finish_reason = reason
            return
        self.fail(req, reason)
        self._finished_unsent.remove(req)

    def take_outputs_to_send(self) -> list[Req]:
        """Running requests with new tokens, then finished ones not sent yet (now taken)."""
        ready = [req for req in self._running if len(req.output_ids) > req.num_sent_tokens]
        ready += self._finished_unsent
        self._finished_unsent = []
        self.times.sent(ready)
        return ready

    def enqueue_embedding(self, req: EmbeddingReq) -> None:
        """An embedding input waits for a step."""
        self._waiting_embeddings.append(req)

    def take_embeddings(self, count: int) -> list[EmbeddingReq]:
        """The ``count`` oldest waiting embedding inputs, out of the queue (their step has run them)."""
        return [self._waiting_embeddings.popleft() for _ in range(count)]

    def end_embedding(self, req: EmbeddingReq, vector: bytes = b"", refusal: FinishReason | None = None) -> None:
        """An embedding input is done, embedded (``vector``) or not (``refusal``): it goes out with the next send."""
        self._embeddings_unsent.append((req.rid, vector, len(req.input_ids), refusal))

    def take_embedding_outputs(self) -> list[EmbeddingRow]:
        """The embedding rows not sent yet (now taken)."""
        rows, self._embeddings_unsent = self._embeddings_unsent, []
        return rows

    def pause(self) -> None:
        self._is_paused = True

    def resume(self) -> None:
        self._is_paused = False

    # -- moves --------------------------------------------------------------

    def _become(self, req: Req, status: RequestStatus) -> None:
        if not req.status.can_become(status):
            raise IllegalTransition(f"request {req.rid!r} cannot go from {req.status.name} to {status.name}")
        req.status = status

    @staticmethod
    def _check(req: Req, status: RequestStatus) -> None:
        if req.status is not status:
            raise IllegalTransition(f"request {req.rid!r} is {req.status.name}, not {status.name}")

    def _leave(self, req: Req, was: RequestStatus) -> None:
        """Take a request out of its group and out of the queue it was in (``was``: its status there)."""
        if req.is_waiting_for_leader:
            req.leave_leader()
            if was is RUNNING:
                self._running.remove(req)
            return  # a waiting follower is held by its leader, not by the queue
        successor = req.hand_over_followers()
        if was is RUNNING:
            self._running.remove(req)
        elif was is WAITING:
            position = self._waiting.index(req)
            if successor is None:
                del self._waiting[position]
            else:
                self._waiting[position] = successor

    def _abort_completion(self, rid: str, reason: FinishReason) -> bool:
        for req in self._running:
            if req.rid == rid:
                self.finish(req, reason)
                return True
        for leader in self._waiting:
            for req in leader.group:
                if req.rid == rid:
                    self.finish(req, reason)
                    return True
        return False

    def _abort_waiting_embeddings(self, rid: str, reason: FinishReason) -> bool:
        aborted = [req for req in self._waiting_embeddings if req.rid == rid]
        for req in aborted:
            self._waiting_embeddings.remove(req)
            self.end_embedding(req, refusal=reason)
        return bool(aborted)

    def _end(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self.kv_memory.release(req)
        self._finished_unsent.append(req)
