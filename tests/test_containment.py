"""Counting contained failures, and logging them without flooding the log."""

from __future__ import annotations

import logging

from tercet.containment import ContainedFailures


def test_counts_by_kind_and_by_plugin():
    failures = ContainedFailures("scheduler")
    failures.record("sampling", "row 3", with_traceback=False)
    failures.record("scheduling_policy", "order()", plugin="acme", with_traceback=False)
    failures.record("scheduling_policy", "order()", plugin="acme", with_traceback=False)
    failures.count("malformed_message")
    assert failures.as_dict() == {
        "total": 4,
        "by_kind": {"sampling": 1, "scheduling_policy": 2, "malformed_message": 1},
        "by_plugin": {"acme": 2},
    }


def test_the_log_shows_the_first_traceback_then_powers_of_two(caplog):
    failures = ContainedFailures("detokenizer", logging.getLogger("test.containment"))
    with caplog.at_level(logging.ERROR):
        for _ in range(9):
            try:
                raise ValueError("boom")
            except ValueError:
                failures.record("detokenizer", "request r failed", plugin="acme")
    lines = [record for record in caplog.records if "contained failure" in record.getMessage()]
    assert [record.getMessage().count("times so far") for record in lines] == [0, 1, 1, 1]  # 1st, 2nd, 4th, 8th
    assert "8 times so far" in lines[-1].getMessage()
    assert lines[0].exc_info and not any(record.exc_info for record in lines[1:])
    assert "(plugin 'acme')" in lines[0].getMessage() and "the detokenizer goes on" in lines[0].getMessage()
    assert failures.total == 9
