"""Sampling a step's rows so that one request's failure stays with that request.

The batch is sampled in one go, as always. Should that raise, something in
one row's parameters is to blame, not the batch: each row is then sampled on
its own (a row's token depends only on its own logits, seed and step, so the
result is the same as in the batch), and the rows that still fail end their
request with an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tercet.containment import ContainedFailures
from tercet.ipc.messages import FinishReason
from tercet.scheduler.req import Req

if TYPE_CHECKING:
    from tercet.scheduler.request_queues import RequestQueues
    from tercet.scheduler.stop_conditions import StopConditions


@dataclass(frozen=True)
class TokenChoice:
    token_id: int
    logprob: float | None = None
    top_logprobs: list | None = None


def sample_rows(reqs: list[Req], logits, stop_conditions: "StopConditions", failures: ContainedFailures,
                queues: "RequestQueues", assumed: list[list[int]] | None = None) -> list[TokenChoice | None]:
    """The next token of each request (row i of ``logits`` is ``reqs[i]``); None
    where that request failed and was ended (through ``queues``). ``assumed[i]``,
    where given, are tokens row i takes as already output (drafts being verified):
    the row is sampled as the step after them would be."""
    assumed = assumed or [[] for _ in reqs]
    try:
        return _sample(reqs, logits, stop_conditions, assumed)
    except Exception:
        failures.record("sampling", f"sampling a batch of {len(reqs)} rows failed; sampling them one by one")
    choices: list[TokenChoice | None] = []
    for row, req in enumerate(reqs):
        try:
            choices.extend(_sample([req], logits[row:row + 1], stop_conditions, assumed[row:row + 1]))
        except Exception:
            failures.record("sampling", f"sampling request {req.rid!r} failed")
            if not req.is_finished:  # its grammar may have ended it already this step
                queues.fail(req, FinishReason.internal_failure("sampling its next token"))
            choices.append(None)
    return choices


def _sample(reqs: list[Req], logits, stop_conditions, assumed: list[list[int]]) -> list[TokenChoice]:
    from tercet.model.sampler import SamplingBatch, sample

    output_ids = [_output_with(req, extra) for req, extra in zip(reqs, assumed)]
    sampling_batch = SamplingBatch.from_params(
        [req.sampling_params for req in reqs],
        seeds=[req.seed for req in reqs],
        steps=[len(output) for output in output_ids],
        prompt_ids=[req.input_ids for req in reqs],
        output_ids=output_ids,
        stop_token_ids_for_min_tokens=[stop_conditions.expected_stop_token_ids(req) for req in reqs],
        device=logits.device,
    )
    result = sample(logits, sampling_batch)
    if result.logprobs is None:
        return [TokenChoice(token_id) for token_id in result.token_ids]
    return [
        TokenChoice(token_id, logprob, top)
        for token_id, logprob, top in zip(result.token_ids, result.logprobs, result.top_logprobs)
    ]


def _output_with(req: Req, assumed: list[int]) -> list[int]:
    # The request's own list when nothing is assumed: no copy for a plain row.
    return req.output_ids + assumed if assumed else req.output_ids
