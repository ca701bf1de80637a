"""A request whose output cannot be built or encoded ends alone with an internal error row."""

from __future__ import annotations

from containment_helpers import greedy, is_internal_failure, run_to_the_end

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.scheduler import output


def test_a_row_that_cannot_be_built_ends_its_request(harness, monkeypatch):
    build_row = output.output_row

    def output_row(req):
        if req.rid == "bad":
            raise KeyError("a bug in one request's row")
        return build_row(req)

    monkeypatch.setattr(output, "output_row", output_row)
    harness.send(TokenizedGenerateReq("good", [5, 6, 7], greedy(4)))
    harness.send(TokenizedGenerateReq("bad", [5, 6, 7], greedy(4)))
    tokens, reasons = run_to_the_end(harness)
    assert is_internal_failure(reasons["bad"]) and tokens["bad"] == []
    assert reasons["good"].kind == "length" and len(tokens["good"]) == 4
    assert harness.scheduler.failures.as_dict()["by_kind"] == {"output": 1}


def test_a_row_that_cannot_be_encoded_ends_its_request_and_the_batch_still_goes_out(harness):
    harness.send(TokenizedGenerateReq("good", [5, 6, 7], greedy(4)))
    harness.send(TokenizedGenerateReq("bad", [8, 9, 10], greedy(4)))
    harness.step()  # both admitted and prefilled; their first tokens went out
    (bad,) = [req for req in harness.scheduler.queues.running if req.rid == "bad"]
    bad.num_prefix_cache_hits = object()  # no serializer can encode this
    tokens, reasons = run_to_the_end(harness)
    assert is_internal_failure(reasons["bad"])
    assert reasons["good"].kind == "length" and len(tokens["good"]) == 3  # the first came with the first step
    assert harness.scheduler.failures.as_dict()["by_kind"]["output"] == 2  # the batch, then the row
    assert bad.req_pool_index is None  # its KV table row was freed
