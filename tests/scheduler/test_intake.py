"""What the scheduler refuses on receipt: forged or confused messages never reach its state."""

from __future__ import annotations

import pytest
from containment_helpers import greedy, run_to_the_end

from tercet.ipc.messages import FinishReason, TokenizedGenerateReq
from tercet.sampling_params import SamplingParams


def refusal(harness, message):
    harness.send(message)
    tokens, reasons = run_to_the_end(harness)
    n = message.sampling_params.n
    # Every completion id its sender waits on is told.
    assert set(reasons) == ({message.rid} if n == 1 else {f"{message.rid}#{index}" for index in range(n)})
    assert {(reason.kind, reason.status_code) for reason in reasons.values()} == {("abort", 400)}
    assert not harness.scheduler.queues.has_requests
    (text,) = {reason.message for reason in reasons.values()}
    return text


@pytest.mark.parametrize("message, expected", [
    (TokenizedGenerateReq("r", [1, 10**9], greedy(2)), "prompt token ids must be in"),
    (TokenizedGenerateReq("r", [], greedy(2)), "the prompt is empty"),
    (TokenizedGenerateReq("r", [1, 2], SamplingParams(max_new_tokens=2, temperature=-1.0)), "temperature"),
    (TokenizedGenerateReq("r", [1, 2], SamplingParams(max_new_tokens=-5)), "max_tokens"),
    (TokenizedGenerateReq("r", [1, 2], greedy(2, stop_token_ids=[10**9])), "stop_token_ids"),
    (TokenizedGenerateReq("r", [1, 2], greedy(2, n=3, top_logprobs_num=10**6)), "top_logprobs"),
])
def test_values_the_model_cannot_run_are_refused_alone(harness, message, expected):
    assert expected in refusal(harness, message)


def test_a_prompt_past_the_context_length_is_refused(make_harness):
    harness = make_harness(max_total_tokens=4096)
    context_len = harness.scheduler.model_runner.context_len
    message = refusal(harness, TokenizedGenerateReq("long", [1] * context_len, greedy(1)))
    assert "context length" in message


def test_after_refusals_the_scheduler_still_serves(harness):
    harness.send(TokenizedGenerateReq("bad", [10**9], greedy(2)))
    harness.send(TokenizedGenerateReq("good", [1, 2, 3], greedy(3)))
    tokens, reasons = run_to_the_end(harness)
    assert reasons["bad"].status_code == 400
    assert reasons["good"].kind == "length" and len(tokens["good"]) == 3


def deliver_raw(harness, message) -> list:
    """Send a message and return what the scheduler's receiver let through."""
    harness.to_scheduler.send(message)
    assert harness.scheduler.receiver.poll(5000)
    return harness.scheduler.receiver.receive_pending()


def test_a_request_with_fields_of_the_wrong_type_is_dropped_on_receipt(harness, caplog):
    assert deliver_raw(harness, TokenizedGenerateReq("r", [1, 2], 5)) == []
    assert deliver_raw(harness, TokenizedGenerateReq("r", ["1"], greedy(2))) == []
    assert "TokenizedGenerateReq.sampling_params: expected SamplingParams, got int" in caplog.text
    assert "edge 1 (TokenizerManager -> scheduler)" in caplog.text
    assert harness.scheduler.failures.as_dict()["by_kind"] == {"malformed_message": 2}


def test_a_message_no_handler_takes_is_dropped(harness, caplog):
    (message,) = deliver_raw(harness, FinishReason("stop"))
    harness.scheduler.dispatch(message)
    assert "dropped a FinishReason from edge 1" in caplog.text
    assert harness.scheduler.failures.as_dict()["by_kind"] == {"unhandled_message": 1}
    harness.send(TokenizedGenerateReq("after", [1, 2], greedy(2)))
    tokens, _ = run_to_the_end(harness)
    assert len(tokens["after"]) == 2
