from dataclasses import dataclass

import pytest

from tercet.errors import TercetError
from tercet.ipc.dispatcher import TypeBasedDispatcher
from tercet.testing import Ping


@dataclass(frozen=True)
class LoudPing(Ping):
    pass


@dataclass
class Other:
    pass


def test_dispatches_by_type_and_returns_the_handler_result():
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: m.text + "!"), (Other, lambda m: "other")])
    assert dispatcher(Ping("1")) == "1!"
    assert dispatcher(Other()) == "other"


def test_subclass_reaches_base_handler_unless_it_has_its_own():
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: "base")])
    assert dispatcher(LoudPing("0")) == "base"
    dispatcher = TypeBasedDispatcher([(Ping, lambda m: "base"), (LoudPing, lambda m: "loud")])
    assert dispatcher(LoudPing("0")) == "loud"


def test_unknown_type_is_an_error():
    with pytest.raises(TercetError, match="no handler for message type Other"):
        TypeBasedDispatcher([(Ping, lambda m: None)])(Other())


def test_contained_dispatch_drops_what_no_handler_takes_and_what_a_handler_fails_on(caplog):
    from tercet.containment import ContainedFailures

    seen = []

    def handle(message):
        if message.text.startswith("-"):
            raise ValueError("negative")
        seen.append(message.text)

    failures = ContainedFailures("test")
    dispatcher = TypeBasedDispatcher([(Ping, handle)])
    for message in (Ping("1"), Other(), Ping("-1"), LoudPing("2")):
        dispatcher.dispatch_contained(message, "edge 9 (a test)", failures)
    assert seen == ["1", "2"]
    assert failures.as_dict()["by_kind"] == {"unhandled_message": 1, "message_handler": 1}
    assert "dropped a Other from edge 9 (a test): no handler takes it here" in caplog.text
    assert "handling a Ping from edge 9 (a test) failed" in caplog.text
