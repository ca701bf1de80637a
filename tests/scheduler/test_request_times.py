"""Request times: the queue, prefill and decode histograms follow a request through the queues."""

from __future__ import annotations

from tercet.ipc.messages import FinishReason
from tercet.sampling_params import SamplingParams
from tercet.scheduler.req import Req
from tercet.scheduler.request_queues import RequestQueues


class NoKVMemory:
    def release(self, req):
        pass


def counts(queues: RequestQueues) -> tuple[int, int, int]:
    times = queues.times
    return times.queue.count, times.prefill.count, times.decode.count


def test_queue_prefill_and_decode_are_each_observed_once_per_completion():
    queues = RequestQueues(NoKVMemory())
    req = Req("a", [1, 2, 3], SamplingParams(max_new_tokens=3), queues.next_arrival_index())
    queues.enqueue(req)
    queues.admit(req)
    assert counts(queues) == (1, 0, 0) and req.admitted_at is not None
    req.output_ids.append(7)
    queues.take_outputs_to_send()
    assert counts(queues) == (1, 1, 0) and req.first_token_at is not None
    req.output_ids.append(8)
    queues.take_outputs_to_send()
    assert counts(queues) == (1, 1, 0)  # a later token ends nothing
    queues.finish(req, FinishReason("length"))
    queues.take_outputs_to_send()
    assert counts(queues) == (1, 1, 1)
    assert queues.times.decode.total >= 0 and queues.times.prefill.total >= 0


def test_a_one_token_answer_has_a_prefill_and_a_zero_length_decode():
    queues = RequestQueues(NoKVMemory())
    req = Req("a", [1], SamplingParams(max_new_tokens=1), queues.next_arrival_index())
    queues.enqueue(req)
    queues.admit(req)
    req.output_ids.append(7)
    queues.finish(req, FinishReason("length"))
    queues.take_outputs_to_send()
    assert counts(queues) == (1, 1, 1) and queues.times.decode.total == 0


def test_a_request_ended_before_its_first_token_has_neither():
    queues = RequestQueues(NoKVMemory())
    waiting, running = (Req(rid, [1], SamplingParams(), queues.next_arrival_index()) for rid in ("w", "r"))
    for req in (waiting, running):
        queues.enqueue(req)
    queues.admit(running)
    queues.abort("w", FinishReason("abort"))
    queues.abort("r", FinishReason("abort"))
    queues.take_outputs_to_send()
    assert counts(queues) == (1, 0, 0)
