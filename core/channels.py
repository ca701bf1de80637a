"""Typed ZeroMQ channels: a PUSH or PULL socket plus the configured serializer.

Every edge is one-way PUSH/PULL. A message that does not decode to a
registered type is logged and dropped, so a bad sender cannot take a manager down.
"""

from __future__ import annotations

import logging

import zmq
import zmq.asyncio

logger = logging.getLogger(__name__)


def _configure(socket: zmq.Socket) -> None:
    # Unbounded queues: the scheduler must never block on a slow reader, and
    # a dropped message would lose a request's output.
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.LINGER, 0)


def _attach(socket: zmq.Socket, endpoint: str, bind: bool) -> None:
    _configure(socket)
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
    def __init__(self, context: zmq.Context, endpoint: str, serializer, bind: bool = True):
        self.socket = context.socket(zmq.PULL)
        _attach(self.socket, endpoint, bind)
        self.serializer = serializer

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
            message = _decode_or_none(self.serializer, data.bytes)
            if message is not None:
                messages.append(message)

    def close(self) -> None:
        self.socket.close(linger=0)


class AsyncMessageReceiver:
    def __init__(self, context: zmq.asyncio.Context, endpoint: str, serializer, bind: bool = True):
        self.socket = context.socket(zmq.PULL)
        _attach(self.socket, endpoint, bind)
        self.serializer = serializer

    async def receive(self):
        while True:
            message = _decode_or_none(self.serializer, await self.socket.recv())
            if message is not None:
                return message

    def close(self) -> None:
        self.socket.close(linger=0)


def _decode_or_none(serializer, data: bytes):
    try:
        return serializer.decode(data)
    except Exception as error:  # any undecodable input is the sender's fault, not ours
        logger.error("dropped an undecodable message (%d bytes): %s", len(data), error)
        return None
