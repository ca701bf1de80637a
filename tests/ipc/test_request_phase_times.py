"""A request's phase times ride on its finishing row: through both serializers, the receiver's
field check, and the split of a batch between API workers."""

from __future__ import annotations

import pytest

from tercet.ipc.message_check import MalformedMessageError, check_message
from tercet.ipc.messages import CORE_MESSAGE_TYPES, BatchStrOutput, FinishReason, MessageRegistry
from tercet.ipc.request_phase_times import RequestPhaseTimes
from tercet.ipc.result_routes import ResultRoutes
from tercet.plugins.msgpack_serializer import MsgpackSerializer
from tercet.plugins.pickle_serializer import PickleSerializer

TIMES = RequestPhaseTimes(arrived=1_700_000_000.25, admitted=1_700_000_000.5, first_token=None,
                          finished=1_700_000_001.0)


def batch(rids, phase_times) -> BatchStrOutput:
    count = len(rids)
    finished = [FinishReason("length") if times is not None else None for times in phase_times] or [None] * count
    return BatchStrOutput(rids, ["x"] * count, [[1]] * count, finished, [3] * count, [1] * count, [None] * count,
                          [None] * count, [0] * count, phase_times)


@pytest.mark.parametrize("serializer", [MsgpackSerializer, PickleSerializer])
def test_phase_times_travel_on_the_finishing_row_only(serializer):
    codec = serializer(MessageRegistry(CORE_MESSAGE_TYPES))
    message = batch(["a", "b"], [None, TIMES])
    decoded = codec.decode(codec.encode(message))
    assert decoded == message and decoded.phase_times[1] == TIMES
    check_message(decoded)


def test_a_forged_time_is_refused_at_the_edge():
    with pytest.raises(MalformedMessageError, match="phase_times"):
        check_message(batch(["a"], [RequestPhaseTimes("soon", None, None, 1.0)]))


class Recorder:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def test_a_batch_split_between_workers_keeps_each_row_s_times():
    routes = ResultRoutes(lambda endpoint: Recorder(), ["ipc://w1", "ipc://w2"])
    routes.send_batch(batch(["w2:a", "w1:b"], [TIMES, None]))
    assert [sent.phase_times for sender in routes.senders for sent in sender.sent] == [[None], [TIMES]]
    # A sender that has no times (an older or a plugin's) leaves the column empty, and it stays so.
    routes.send_batch(batch(["w2:a", "w1:b"], []))
    assert [sender.sent[-1].phase_times for sender in routes.senders] == [[], []]
