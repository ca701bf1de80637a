"""ManagerIO: channels opened and closed in one place, and one loop-error policy for every manager."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from tercet.config import load_config
from tercet.containment import ContainedFailures
from tercet.ipc.port_args import PortArgs
from tercet.metrics.stage_timer import stage_timer
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.manager import create_plugin_manager
from tercet.processes.context import ProcessContext
from tercet.processes.manager_io import ManagerIO
from tercet.testing import Ping


@dataclass(frozen=True)
class Unwanted:
    text: str


class PingPlugin:
    """A third party's message type, handled in the component ``"tester"``."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def register_message_types(self, register):
        register("test.ping", Ping)
        register("test.unwanted", Unwanted)

    @hookimpl
    def register_message_handlers(self, component, register):
        if component == "tester":
            register(Ping, lambda subject, message: self.seen.append((subject, message)))


@pytest.fixture
def plugin():
    return PingPlugin()


@pytest.fixture
def context(plugin):
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[plugin])
    plugin_manager.load_setuptools_entrypoints("tercet")
    return ProcessContext.create(load_config(environ={}), plugin_manager)


@pytest.fixture
def port_args(context):
    port_args = PortArgs.create(context.create_transport())
    yield port_args
    port_args.remove_runtime_dir()


@pytest.fixture
def failures():
    return ContainedFailures("tester")


@pytest.fixture
def io(context, failures, port_args):
    io = ManagerIO(context, "tester", "the test's edge")
    io.open_receiver(port_args.scheduler_input, failures)
    yield io
    io.close()


def deliver(context, io, port_args, *messages):
    """Send ``messages`` to ``io``'s receiver from a second ManagerIO, then dispatch what arrived."""
    sender_io = ManagerIO(context, "sender", "unused")
    sender = sender_io.open_sender(port_args.scheduler_input)
    for message in messages:
        sender.send(message)
    received = 0
    while received < len(messages):
        assert io.receiver.poll(5000)
        pending = io.receiver.receive_pending()
        received += len(pending)
        for message in pending:
            io.dispatch(message)
    sender_io.close()


def test_plugin_handlers_see_a_fresh_subject_at_each_message(context, io, plugin, port_args):
    snapshots = iter(["first snapshot", "second snapshot"])
    io.set_handlers(io.plugin_handlers(lambda: next(snapshots)))
    deliver(context, io, port_args, Ping("a"), Ping("b"))
    assert plugin.seen == [("first snapshot", Ping("a")), ("second snapshot", Ping("b"))]


def test_a_raising_handler_loses_its_message_only_and_is_counted(context, io, failures, port_args):
    handled = []

    def handle(message):
        if message.text == "bad":
            raise ValueError("a bug in a handler")
        handled.append(message.text)

    io.set_handlers([(Ping, handle)])
    deliver(context, io, port_args, Ping("before"), Ping("bad"), Ping("after"))
    assert handled == ["before", "after"]
    assert failures.as_dict()["by_kind"] == {"message_handler": 1}


def test_a_message_no_handler_takes_is_dropped_and_counted(context, io, failures, port_args):
    handled = []
    io.set_handlers([(Ping, handled.append)])
    deliver(context, io, port_args, Unwanted("x"), Ping("y"))
    assert handled == [Ping("y")]
    assert failures.as_dict()["by_kind"] == {"unhandled_message": 1}


def test_what_is_not_an_exception_ends_the_loop(io):
    def interrupt(message):
        raise KeyboardInterrupt

    io.set_handlers([(Ping, interrupt)])
    with pytest.raises(KeyboardInterrupt):
        io.dispatch(Ping("stop"))


def test_close_closes_every_channel_and_terminates_both_contexts(context, failures, port_args):
    io = ManagerIO(context, "tester", "the test's edge")
    receiver = io.open_async_receiver(port_args.tokenizer_input, failures)
    senders = [io.open_sender(port_args.scheduler_input), io.open_sender(port_args.detokenizer_input)]
    io.close()
    assert receiver.socket.closed and all(sender.socket.closed for sender in senders)
    assert io.zmq_context.closed and io.async_zmq_context.closed and io.is_closed
    io.close()  # a second close does nothing


def test_dispatch_forever_serves_an_event_loop_until_cancelled(context, failures, port_args):
    io = ManagerIO(context, "tester", "the test's edge")
    io.open_async_receiver(port_args.tokenizer_input, failures)
    handled = []
    io.set_handlers([(Ping, handled.append)])
    sender = io.open_sender(port_args.tokenizer_input)

    async def scenario():
        loop_task = asyncio.get_running_loop().create_task(io.dispatch_forever(stage_timer("tester", 0, None)))
        sender.send(Ping("over the loop"))
        while not handled:
            await asyncio.sleep(0.001)
        loop_task.cancel()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        io.close()
    assert handled == [Ping("over the loop")]
