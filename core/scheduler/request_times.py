"""How long requests spend in each phase, as the histograms a rank reports to ``/metrics``.

- queue: from arrival at the scheduler to first admission (a retracted request's
  second wait is not a new one);
- prefill: from first admission to the first output token going out;
- decode: from the first output token to the finish (0 for a one-token answer).

A request that ends before its first token (aborted, refused) has no prefill or
decode time. Observing is a bisect and three additions, on the scheduler's loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tercet.metrics.latency_histogram import LatencyHistogram
from tercet.scheduler.req import Req


class RequestTimes:
    def __init__(self):
        self.queue = LatencyHistogram()
        self.prefill = LatencyHistogram()
        self.decode = LatencyHistogram()

    def admitted(self, group: Iterable[Req]) -> None:
        """A group's first admission: each of its completions waited as long as its leader."""
        now = time.monotonic()
        for req in group:
            req.admitted_at = now
            self.queue.observe(now - req.arrived_at)

    def sent(self, reqs: Iterable[Req]) -> None:
        """Outputs of ``reqs`` go out now: a first token ends a prefill, a finish ends a decode."""
        now = time.monotonic()
        for req in reqs:
            if req.first_token_at is None and req.output_ids and req.admitted_at is not None:
                req.first_token_at = now
                self.prefill.observe(now - req.admitted_at)
            if req.is_finished and req.first_token_at is not None:
                self.decode.observe(now - req.first_token_at)
