from dataclasses import dataclass

import pytest

from tercet.dispatcher import TypeBasedDispatcher
from tercet.errors import TercetError


@dataclass
class Ping:
    n: int


@dataclass
class LoudPing(Ping):
    pass


@dataclass
class Other:
    pass


def test_dispatches_by_type_and_returns_the_handler_result():
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: m.n + 1), (Other, lambda m: "other")])
    assert dispatcher(Ping(1)) == 2
    assert dispatcher(Other()) == "other"


def test_subclass_reaches_base_handler_unless_it_has_its_own():
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: "base")])
    assert dispatcher(LoudPing(0)) == "base"
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: "base"), (LoudPing, lambda m: "loud")])
    assert dispatcher(LoudPing(0)) == "loud"


def test_unknown_type_is_an_error():
    with pytest.raises(TercetError, match="no handler for message type Other"):
        TypeBasedDispatcher([(Ping, lambda m: None)])(Other())
