"""A rank's eviction report: it travels as any message does, is checked field by field, and says when it cannot be right."""

from __future__ import annotations

import pytest

from tercet.ipc.eviction_reports import EvictedPrefixesReport
from tercet.ipc.message_check import MalformedMessageError, check_message
from tercet.ipc.messages import CORE_MESSAGE_TYPES, MessageRegistry
from tercet.plugins.msgpack_serializer import MsgpackSerializer

REPORT = EvictedPrefixesReport(1, [[5, 6, 7], [9]], [2, 0], [None, "adapter"])


def test_a_report_round_trips_through_the_default_serializer_and_passes_the_check():
    serializer = MsgpackSerializer(MessageRegistry(CORE_MESSAGE_TYPES))
    decoded = serializer.decode(serializer.encode(REPORT))
    assert decoded == REPORT
    check_message(decoded)


def test_a_field_of_the_wrong_type_fails_the_check():
    with pytest.raises(MalformedMessageError):
        check_message(EvictedPrefixesReport(1, [["5"]], [0], [None]))


@pytest.mark.parametrize("report, well_formed", [
    (REPORT, True),
    (EvictedPrefixesReport(0, [], [], []), True),
    (EvictedPrefixesReport(0, [[1]], [0, 0], [None]), False),  # columns of different lengths
    (EvictedPrefixesReport(0, [[1, 2]], [2], [None]), False),  # keeps all it dropped
    (EvictedPrefixesReport(0, [[1, 2]], [-1], [None]), False),
])
def test_a_report_says_whether_it_is_well_formed(report, well_formed):
    assert report.is_well_formed is well_formed
