"""A request whose stop check fails ends alone; the others in its step go on."""

from __future__ import annotations

from containment_helpers import greedy, is_internal_failure, run_to_the_end

from tercet.ipc.messages import TokenizedGenerateReq


def test_a_failing_stop_check_ends_only_its_request(harness, monkeypatch):
    stop_conditions = harness.scheduler.stop_conditions
    check = stop_conditions.check

    def failing_check(req):
        if req.rid == "bad" and len(req.output_ids) == 2:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a tokenizer bug")
        return check(req)

    monkeypatch.setattr(stop_conditions, "check", failing_check)
    harness.send(TokenizedGenerateReq("good", [1, 2, 3], greedy(5)))
    harness.send(TokenizedGenerateReq("bad", [1, 2, 3], greedy(5)))
    tokens, reasons = run_to_the_end(harness)
    assert is_internal_failure(reasons["bad"]) and len(tokens["bad"]) == 2
    assert reasons["good"].kind == "length" and len(tokens["good"]) == 5
    assert harness.scheduler.failures.as_dict()["by_kind"] == {"stop_check": 1}
