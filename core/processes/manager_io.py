"""A manager's I/O and life cycle: its ZeroMQ channels, the dispatch of what it receives, closing.

The three managers (TokenizerManager, Scheduler, DetokenizerManager) each
open their channels through one :class:`ManagerIO`, hand it their handlers
(and, through it, the plugins' handlers for their component), and close it
when they stop; closing closes every socket it opened and terminates its
ZeroMQ contexts.

The loop-error policy, the same in every manager:

- A message that does not decode, or whose fields do not hold the types its
  class declares, is dropped on receipt, logged with the edge it came in on and
  counted (``undecodable_message``, ``malformed_message``; see
  :mod:`tercet.ipc.channels`).
- A message that no handler takes is dropped, logged every time and counted
  (``unhandled_message``).
- A handler that raises an ``Exception`` loses that message only: the failure
  is logged (with its traceback the first time) and counted
  (``message_handler``), and the loop goes on with the next message. A
  handler that can fail one request on its own (the scheduler's, the
  detokenizer's) catches that itself and ends the request with an error its
  client sees; this policy is the wall behind it.
- Anything else (``KeyboardInterrupt``, ``SystemExit``), and any failure
  outside dispatch, ends the loop and with it the process; the supervisor
  then stops the server with a clear message.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import zmq
import zmq.asyncio

from tercet.containment import ContainedFailures
from tercet.ipc.channels import AsyncMessageReceiver, MessageReceiver, MessageSender
from tercet.ipc.dispatcher import TypeBasedDispatcher
from tercet.plugin_host.manager import message_handlers
from tercet.processes.context import ProcessContext

Handler = Callable[[Any], Any]


class ManagerIO:
    def __init__(self, context: ProcessContext, component: str, edge: str):
        # The component name plugins register message handlers for ("tokenizer", "scheduler", "detokenizer").
        self.component = component
        # Where received messages come from, for the log.
        self.edge = edge
        self.plugin_manager = context.plugin_manager
        self.serializer = context.create_serializer()
        self.zmq_context = zmq.Context()
        # Made only for a manager that receives on an event loop (the TokenizerManager).
        self.async_zmq_context: zmq.asyncio.Context | None = None
        self.receiver: MessageReceiver | AsyncMessageReceiver | None = None
        self.senders: list[MessageSender] = []
        self.failures: ContainedFailures | None = None
        self.dispatcher = TypeBasedDispatcher([])

    # -- opening -----------------------------------------------------------

    def open_sender(self, endpoint: str) -> MessageSender:
        # Sending never blocks (unbounded queues), so plain sockets serve an event loop too.
        sender = MessageSender(self.zmq_context, endpoint, self.serializer)
        self.senders.append(sender)
        return sender

    def open_receiver(self, endpoint: str, failures: ContainedFailures) -> MessageReceiver:
        """Bind the manager's one inbound socket; ``failures`` counts what is dropped there or in dispatch."""
        self.failures = failures
        self.receiver = MessageReceiver(
            self.zmq_context, endpoint, self.serializer, bind=True, edge=self.edge, failures=failures
        )
        return self.receiver

    def open_async_receiver(self, endpoint: str, failures: ContainedFailures) -> AsyncMessageReceiver:
        self.failures = failures
        self.async_zmq_context = zmq.asyncio.Context()
        self.receiver = AsyncMessageReceiver(
            self.async_zmq_context, endpoint, self.serializer, bind=True, edge=self.edge, failures=failures
        )
        return self.receiver

    # -- dispatching -------------------------------------------------------

    def plugin_handlers(self, subject: Callable[[], object]) -> list[tuple[type, Handler]]:
        """Every plugin's handlers for this component, each called as ``handler(subject(), message)``:
        ``subject`` gives what the plugin may see (the manager, or a snapshot of it)."""
        return [
            (message_type, lambda message, handler=handler: handler(subject(), message))
            for message_type, handler in message_handlers(self.plugin_manager, self.component)
        ]

    def set_handlers(self, handlers: Iterable[tuple[type, Handler]]) -> None:
        self.dispatcher = TypeBasedDispatcher(handlers)

    def dispatch(self, message) -> None:
        """Handle one received message under the loop-error policy above."""
        self.dispatcher.dispatch_contained(message, self.edge, self.failures)

    def dispatch_pending(self) -> None:
        """Receive and dispatch every message already queued, without blocking."""
        for message in self.receiver.receive_pending():
            self.dispatch(message)

    async def dispatch_forever(self, timer) -> None:
        """Receive and dispatch on the event loop until cancelled (receiving happens
        while awaiting, so only dispatch is timed)."""
        while True:
            message = await self.receiver.receive()
            with timer.stage("dispatch"):
                self.dispatch(message)
            timer.end_step()

    # -- closing -----------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.zmq_context.closed

    def close(self) -> None:
        """Close every channel and terminate the contexts; closing again does nothing."""
        if self.is_closed:
            return
        if self.receiver is not None:
            self.receiver.close()
        for sender in self.senders:
            sender.close()
        # Every socket is closed with linger 0, so terminating cannot wait on unsent messages.
        self.zmq_context.term()
        if self.async_zmq_context is not None:
            self.async_zmq_context.term()
