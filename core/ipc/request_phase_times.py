"""When a request passed each phase in its scheduler, carried to the API process with its last output.

The scheduler's rows of a step's outputs (``BatchTokenIDOutput``, then ``BatchStrOutput``) hold one
of these on a request's finishing row and None on every other, so nothing is added per token but
that None. The API process builds the request's trace from them (:mod:`tercet.frontend.request_traces`).
Times are Unix times in seconds (``time.time()``), so that processes, and nodes whose clocks
agree, can be put on one time line; the scheduler converts its own monotonic stamps
(:mod:`tercet.scheduler.request_times`) when the request finishes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestPhaseTimes:
    # Reached the scheduler (its request was set up there).
    arrived: float
    # First admitted into a batch; None: never (aborted or refused while waiting).
    admitted: float | None
    # Its first output token went out; None: none did.
    first_token: float | None
    # Its last output went out, to the detokenizer.
    finished: float


REQUEST_PHASE_TIMES_MESSAGE_TYPES = {"tercet.request_phase_times": RequestPhaseTimes}
