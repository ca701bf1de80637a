import asyncio

import zmq
import zmq.asyncio

from tercet.ipc.channels import AsyncMessageReceiver, MessageReceiver, MessageSender
from tercet.ipc.messages import CORE_MESSAGE_TYPES, AbortReq, MessageRegistry
from tercet.plugins.msgpack_serializer import MsgpackSerializer

SERIALIZER = MsgpackSerializer(MessageRegistry(CORE_MESSAGE_TYPES))


def test_messages_cross_and_garbage_is_dropped(tmp_path):
    endpoint = f"ipc://{tmp_path}/edge"
    context = zmq.Context()
    receiver = MessageReceiver(context, endpoint, SERIALIZER)
    sender = MessageSender(context, endpoint, SERIALIZER)
    raw = context.socket(zmq.PUSH)
    raw.connect(endpoint)
    try:
        raw.send(b"\xc1 not msgpack")
        sender.send(AbortReq("a"))
        sender.send(AbortReq("b"))
        received = []
        while len(received) < 2 and receiver.poll(2000):
            received += receiver.receive_pending()
        assert received == [AbortReq("a"), AbortReq("b")]
    finally:
        raw.close(0)
        sender.close()
        receiver.close()
        context.term()


def test_async_receiver(tmp_path):
    endpoint = f"ipc://{tmp_path}/edge"

    async def exchange():
        async_context = zmq.asyncio.Context()
        receiver = AsyncMessageReceiver(async_context, endpoint, SERIALIZER)
        sync_context = zmq.Context()
        sender = MessageSender(sync_context, endpoint, SERIALIZER)
        sender.send(AbortReq("x"))
        try:
            return await asyncio.wait_for(receiver.receive(), 5)
        finally:
            sender.close()
            receiver.close()

    assert asyncio.run(exchange()) == AbortReq("x")


def first_received(tmp_path, messages: list, receiving_serializer=SERIALIZER):
    """Send ``messages`` over a fresh edge named "edge 7 (a test)"; the first received, and the receiver's failures."""
    from tercet.containment import ContainedFailures

    endpoint = f"ipc://{tmp_path}/edge"
    context = zmq.Context()
    failures = ContainedFailures("test")
    receiver = MessageReceiver(context, endpoint, receiving_serializer, edge="edge 7 (a test)", failures=failures)
    sender = MessageSender(context, endpoint, SERIALIZER)
    try:
        for message in messages:
            sender.send(message)
        received = []
        while not received and receiver.poll(2000):
            received += receiver.receive_pending()
        return received, failures.as_dict()["by_kind"]
    finally:
        sender.close()
        receiver.close()
        context.term()


def test_a_message_whose_fields_do_not_fit_is_dropped_and_counted(tmp_path, caplog):
    # AbortReq(12345) encodes fine; its rid is not a str.
    received, failures = first_received(tmp_path, [AbortReq(12345), AbortReq("kept")])
    assert received == [AbortReq("kept")]
    assert failures == {"malformed_message": 1}
    assert "dropped a malformed message from edge 7 (a test): AbortReq.rid: expected str, got int" in caplog.text


def test_a_message_over_the_decode_limits_is_dropped_and_counted(tmp_path, caplog):
    from tercet.ipc.decode_limits import DecodeLimits

    small = MsgpackSerializer(MessageRegistry(CORE_MESSAGE_TYPES, DecodeLimits(max_bytes=100)))
    received, failures = first_received(tmp_path, [AbortReq("x" * 200), AbortReq("kept")], small)
    assert received == [AbortReq("kept")]
    assert failures == {"message_over_limits": 1}
    assert "dropped a message over the decode limits (223 bytes) from edge 7 (a test)" in caplog.text
