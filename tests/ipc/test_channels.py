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


def test_a_message_whose_fields_do_not_fit_is_dropped_and_counted(tmp_path, caplog):
    from tercet.containment import ContainedFailures

    endpoint = f"ipc://{tmp_path}/edge"
    context = zmq.Context()
    failures = ContainedFailures("test")
    receiver = MessageReceiver(context, endpoint, SERIALIZER, edge="edge 7 (a test)", failures=failures)
    sender = MessageSender(context, endpoint, SERIALIZER)
    try:
        sender.send(AbortReq(12345))  # encodes fine; rid is not a str
        sender.send(AbortReq("kept"))
        received = []
        while not received and receiver.poll(2000):
            received += receiver.receive_pending()
        assert received == [AbortReq("kept")]
        assert failures.as_dict()["by_kind"] == {"malformed_message": 1}
        assert "dropped a malformed message from edge 7 (a test): AbortReq.rid: expected str, got int" in caplog.text
    finally:
        sender.close()
        receiver.close()
        context.term()
