"""A rank's metrics report: it travels as any message does, and says when its histograms cannot be right."""

from __future__ import annotations

import pytest

from tercet.ipc.message_check import check_message
from tercet.ipc.messages import CORE_MESSAGE_TYPES, MessageRegistry
from tercet.ipc.rank_metrics import HistogramCounts, RankMetricsReport
from tercet.plugins.msgpack_serializer import MsgpackSerializer

EMPTY = HistogramCounts([0.1, 1.0], [0, 0, 0], 0.0)


def report(**changes) -> RankMetricsReport:
    fields = dict(rank=0, num_running_requests=2, num_waiting_requests=1, kv_used_tokens=64, kv_evictable_tokens=16,
                  kv_total_tokens=256, page_size=8, prefix_cache=True, prompt_tokens_admitted=40,
                  prompt_tokens_from_cache=8, num_retractions=1, queue_time=HistogramCounts([0.1, 1.0], [1, 2, 2], 0.3),
                  prefill_time=EMPTY, decode_time=EMPTY)
    return RankMetricsReport(**{**fields, **changes})


def test_a_report_round_trips_through_the_default_serializer_and_passes_the_check():
    serializer = MsgpackSerializer(MessageRegistry(CORE_MESSAGE_TYPES))
    decoded = serializer.decode(serializer.encode(report()))
    assert decoded == report()
    check_message(decoded)


@pytest.mark.parametrize("counts, well_formed", [
    (HistogramCounts([0.1, 1.0], [1, 2, 2], 0.3), True),
    (HistogramCounts([], [0], 0.0), True),
    (HistogramCounts([0.1, 1.0], [1, 2], 0.3), False),  # no +Inf count
    (HistogramCounts([0.1, 1.0], [2, 1, 2], 0.3), False),  # a cumulative count that falls
])
def test_histogram_counts_say_whether_they_are_well_formed(counts, well_formed):
    assert counts.is_well_formed is well_formed
