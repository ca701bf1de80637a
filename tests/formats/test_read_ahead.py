"""Tensors read on a thread a few ahead: the same items in order, errors where they happened, nothing left running."""

from __future__ import annotations

import threading

import pytest

from tercet.formats.read_ahead import read_ahead


def test_the_items_come_in_order_and_all_of_them():
    assert list(read_ahead(iter(range(100)), depth=3)) == list(range(100))


def test_the_producer_runs_ahead_of_the_consumer_on_another_thread():
    produced_on = []

    def items():
        for index in range(4):
            produced_on.append(threading.current_thread())
            yield index

    assert list(read_ahead(items())) == [0, 1, 2, 3]
    assert threading.current_thread() not in produced_on


def test_an_error_while_reading_is_raised_where_the_item_would_have_come():
    def items():
        yield "a"
        yield "b"
        raise ValueError("tensor 'c' is truncated")

    got = []
    with pytest.raises(ValueError, match="tensor 'c' is truncated"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == ["a", "b"]


def test_a_consumer_that_stops_early_closes_the_items_and_leaves_no_thread():
    closed = threading.Event()

    def items():
        try:
            for index in range(1000):
                yield index
        finally:
            closed.set()  # a GGUF file closed by the generator's own thread

    before = set(threading.enumerate())
    for item in read_ahead(items(), depth=2):
        if item == 5:
            break
    assert closed.is_set()
    assert set(threading.enumerate()) <= before
