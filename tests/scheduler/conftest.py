"""A scheduler driven in-process over real ZeroMQ sockets, on the tiny model (tercet.testing's harness)."""

from __future__ import annotations

import pytest


@pytest.fixture
def make_harness(tercet_scheduler):
    def make(settings=(), **pools):
        return tercet_scheduler(settings=settings, **pools)

    return make


@pytest.fixture
def harness(make_harness):
    return make_harness()
