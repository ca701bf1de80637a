"""Typed ZeroMQ channels: a PUSH or PULL socket plus the configured serializer.

Every edge is one-way PUSH/PULL. A message that does not decode to a
registered type, is over the decode limits (:mod:`tercet.ipc.decode_limits`),
or whose fields do not hold the types its class declares
(:mod:`tercet.ipc.message_check`), is logged with the edge it came in on, counted
and dropped, so a bad sender cannot take a manager down.
"""

from __future__ import annotations

import logging

import zmq
import zmq.asyncio

from tercet.containment import ContainedFailures
from tercet.ipc.curve import CurveKeys
from tercet.ipc.decode_limits import MessageOverLimitsError
from tercet.ipc.message_check import MalformedMessageError, check_message

logger = logging.getLogger(__name__)

# Set once per process when the server spans nodes (encrypt_tcp_endpoints): every tcp socket uses CURVE.
_curve_keys: CurveKeys | None = None


def encrypt_tcp_endpoints(node_secret: str | None) -> None:
    """From now on, in this process, tcp endpoints use CURVE under keys derived from ``node_secret``
    (:mod:`tercet.ipc.curve`); None: plain tcp, as on one host."""
    global _curve_keys
    _curve_keys = CurveKeys.from_node_secret(node_secret) if node_secret else None


def _configure(socket: zmq.Socket) -> None:
    # Unbounded queues: the scheduler must never block on a slow reader, and
    # a dropped message would lose a request's output.
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.LINGER, 0)


def _attach(socket: zmq.Socket, endpoint: str, bind: bool) -> None:
    _configure(socket)
    if _curve_keys is not None and endpoint.startswith("tcp://"):
        _curve_keys.apply(socket, bind)
    if bind:
        socket.bind(endpoint)
    else:
        socket.connect(endpoint)


class MessageSender:
    def __init__(self, context: zmq.Context, endpoint: str, serializer, bind: bool = False):
        self.socket = context.socket(zmq.PUSH)
        _attach(self.socket, endpoint, bind)
        self.serializer = serializer

    def send(self, message) -> None:
        self.socket.send(self.serializer.encode(message), copy=False)

    def close(self) -> None:
        self.socket.close(linger=0)


class MessageReceiver:
    """``edge`` names where messages come from, for the log; ``failures`` counts the ones dropped."""

    def __init__(self, context: zmq.Context, endpoint: str, serializer, bind: bool = True, edge: str | None = None,
                 failures: ContainedFailures | None = None):
        self.socket = context.socket(zmq.PULL)
        _attach(self.socket, endpoint, bind)
        self.decoder = _Decoder(serializer, edge or endpoint, failures)

    @property
    def endpoint(self) -> str:
        """The address bound, with the port filled in where the system picked it (``tcp://host:*``)."""
        return self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def poll(self, timeout_ms: int | None) -> bool:
        return bool(self.socket.poll(timeout_ms))

    def receive_pending(self) -> list:
        """Every message already queued, without blocking."""
        messages = []
        while True:
            try:
                data = self.socket.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return messages
            message = self.decoder.decode_or_none(data.bytes)
            if message is not None:
                messages.append(message)

    def close(self) -> None:
        self.socket.close(linger=0)


class AsyncMessageReceiver:
    def __init__(self, context: zmq.asyncio.Context, endpoint: str, serializer, bind: bool = True,
                 edge: str | None = None, failures: ContainedFailures | None = None):
        self.socket = context.socket(zmq.PULL)
        _attach(self.socket, endpoint, bind)
        self.decoder = _Decoder(serializer, edge or endpoint, failures)

    async def receive(self):
        while True:
            message = self.decoder.decode_or_none(await self.socket.recv())
            if message is not None:
                return message

    def close(self) -> None:
        self.socket.close(linger=0)


class _Decoder:
    def __init__(self, serializer, edge: str, failures: ContainedFailures | None):
        self.serializer = serializer
        self.edge = edge
        self.failures = failures or ContainedFailures("receiver", logger)

    def decode_or_none(self, data: bytes):
        # Any input that does not decode, or decodes to nonsense, is the sender's fault, not ours.
        try:
            message = self.serializer.decode(data)
        except MessageOverLimitsError as error:
            self._drop("message_over_limits", f"dropped a message over the decode limits ({len(data)} bytes) from {self.edge}: {error}")
            return None
        except Exception as error:
            self._drop("undecodable_message", f"dropped an undecodable message ({len(data)} bytes) from {self.edge}: {error}")
            return None
        try:
            check_message(message)
        except MalformedMessageError as error:
            self._drop("malformed_message", f"dropped a malformed message from {self.edge}: {error}")
            return None
        return message

    def _drop(self, kind: str, description: str) -> None:
        # Each drop is logged (the line names the edge), not only the first of its kind:
        # a forged message is worth seeing every time.
        logger.error("%s", description)
        self.failures.count(kind)
