"""Running a harness to the end and reading every request's tokens and finish reason."""

from __future__ import annotations

from tercet.sampling_params import SamplingParams


def greedy(max_new_tokens, **extra):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=1, ignore_eos=True, **extra)


def run_to_the_end(harness, max_steps=500):
    """Step until nothing runs or waits; ``(tokens, reasons)`` by request id."""
    tokens, reasons = {}, {}
    for _ in range(max_steps):
        for output in harness.step():
            for rid, new_ids, reason in zip(output.rids, output.new_token_ids, output.finished_reasons):
                tokens.setdefault(rid, []).extend(new_ids)
                if reason is not None:
                    reasons[rid] = reason
        if not harness.scheduler.queues.has_requests:
            return tokens, reasons
    raise AssertionError("requests did not finish")


def is_internal_failure(reason) -> bool:
    return reason.kind == "abort" and reason.status_code == 500 and "internal error" in reason.message
