"""Turning a step's results into one BatchTokenIDOutput for the detokenizer.

Each request becomes one row of the batch's columns. Building a row, or
encoding it for the wire, can fail for one request alone (a value its
sampling parameters let through that the serializer refuses, say): that
request is ended with an internal error row, which cannot fail, and the rest
of the batch goes out as usual.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tercet.containment import ContainedFailures
from tercet.ipc.messages import BatchTokenIDOutput, DetokenizeParams, FinishReason, TokenLogprobs
from tercet.ipc.request_phase_times import RequestPhaseTimes
from tercet.scheduler.req import Req

if TYPE_CHECKING:
    from tercet.ipc.channels import MessageSender
    from tercet.scheduler.request_queues import RequestQueues

COLUMNS = (
    "rids", "new_token_ids", "finished_reasons", "prompt_tokens", "completion_tokens",
    "detokenize_params", "output_logprobs", "prompt_logprobs", "cached_tokens", "phase_times",
)


def output_row(req: Req) -> tuple:
    """Everything the request produced since its previous output, in COLUMNS order."""
    params = req.sampling_params
    new_token_ids = req.output_ids[req.num_sent_tokens:]
    return (
        req.rid,
        new_token_ids,
        req.finish_reason,
        len(req.input_ids),
        len(req.output_ids),
        None if req.has_sent_output else DetokenizeParams(params.skip_special_tokens, list(params.stop), params.no_stop_trim),
        TokenLogprobs(new_token_ids, req.unsent_logprobs, req.unsent_top_logprobs) if params.return_logprob else None,
        None if req.has_sent_output else req.prompt_logprobs,
        req.num_prefix_cache_hits or 0,
        phase_times(req) if req.is_finished else None,
    )


def phase_times(req: Req) -> RequestPhaseTimes:
    """When the finished ``req`` passed each phase, its monotonic stamps turned into Unix times."""
    unix_now, now = time.time(), time.monotonic()

    def unix(stamp: float | None) -> float | None:
        return None if stamp is None else unix_now - (now - stamp)

    return RequestPhaseTimes(unix(req.arrived_at), unix(req.admitted_at), unix(req.first_token_at), unix_now)


def failure_row(req: Req, reason: FinishReason) -> tuple:
    """A row ending the request with ``reason``, made of values that always encode."""
    return (
        req.rid, [], reason, len(req.input_ids), len(req.output_ids),
        None if req.has_sent_output else DetokenizeParams(), None, None, 0, None,
    )


def mark_sent(req: Req) -> None:
    req.num_sent_tokens = len(req.output_ids)
    req.has_sent_output = True
    req.unsent_logprobs, req.unsent_top_logprobs = [], []


def batch_of(rows: list[tuple]) -> BatchTokenIDOutput:
    return BatchTokenIDOutput(**{name: [row[column] for row in rows] for column, name in enumerate(COLUMNS)})


def send_outputs_contained(reqs: list[Req], sender: "MessageSender", failures: ContainedFailures,
                           queues: "RequestQueues") -> None:
    """Send every request's unsent output through ``sender``; a request whose row
    cannot be built or encoded is ended alone (through ``queues``) with an internal error."""
    rows = []
    for req in reqs:
        try:
            rows.append(output_row(req))
        except Exception:
            failures.record("output", f"building the output of request {req.rid!r} failed")
            rows.append(_fail(queues, req))
    try:
        sender.send(batch_of(rows))
    except Exception:
        # Find the rows that cannot be encoded; the others are sent as they are.
        failures.record("output", "encoding a step's output failed; checking it row by row")
        serializer = sender.serializer
        for position, (req, row) in enumerate(zip(reqs, rows)):
            try:
                serializer.encode(batch_of([row]))
            except Exception:
                failures.record("output", f"the output of request {req.rid!r} cannot be encoded", with_traceback=False)
                rows[position] = _fail(queues, req)
        sender.send(batch_of(rows))
    for req in reqs:
        mark_sent(req)


def _fail(queues: "RequestQueues", req: Req) -> tuple:
    """End ``req`` now and give the row that tells its client (in this batch, not a later one)."""
    queues.fail_in_this_output(req, FinishReason.internal_failure("building its output"))
    return failure_row(req, req.finish_reason)
