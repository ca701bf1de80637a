import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from tercet.ipc import channels
from tercet.ipc.channels import MessageReceiver, MessageSender, encrypt_tcp_endpoints
from tercet.ipc.curve import CurveKeys
from tercet.ipc.messages import CORE_MESSAGE_TYPES, AbortReq, MessageRegistry
from tercet.plugins.msgpack_serializer import MsgpackSerializer

SERIALIZER = MsgpackSerializer(MessageRegistry(CORE_MESSAGE_TYPES))
SECRET = "a node secret of 24 chars"
FAILED_HANDSHAKES = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


@pytest.fixture
def encrypted():
    encrypt_tcp_endpoints(SECRET)
    yield
    encrypt_tcp_endpoints(None)


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_every_node_derives_the_same_keys_and_only_from_the_secret():
    assert CurveKeys.from_node_secret(SECRET) == CurveKeys.from_node_secret(SECRET)
    assert CurveKeys.from_node_secret(SECRET).server_public != CurveKeys.from_node_secret(SECRET + "!").server_public


def test_encrypted_endpoints_carry_messages(encrypted, context):
    receiver = MessageReceiver(context, "tcp://127.0.0.1:*", SERIALIZER)
    sender = MessageSender(context, receiver.endpoint, SERIALIZER)
    assert receiver.socket.curve_server and sender.socket.mechanism == zmq.CURVE
    sender.send(AbortReq("a"))
    received = []
    while not received and receiver.poll(10_000):
        received += receiver.receive_pending()
    assert received == [AbortReq("a")]


def failed_handshake_then_nothing(receiver: MessageReceiver, monitor: zmq.Socket) -> list:
    """Wait for the receiver to turn a peer away at the handshake; what had arrived by then."""
    while not recv_monitor_message(monitor)["event"] & FAILED_HANDSHAKES:
        pass
    receiver.socket.disable_monitor()
    monitor.close(0)  # a monitor left open holds the context's end
    return receiver.receive_pending()


def test_a_peer_without_the_secret_cannot_connect(encrypted, context):
    receiver = MessageReceiver(context, "tcp://127.0.0.1:*", SERIALIZER)
    monitor = receiver.socket.get_monitor_socket()
    plain = context.socket(zmq.PUSH)
    plain.linger = 0  # its message never leaves: the context must not wait for it
    plain.connect(receiver.endpoint)
    plain.send(SERIALIZER.encode(AbortReq("forged")))
    assert failed_handshake_then_nothing(receiver, monitor) == []


def test_a_peer_with_another_secret_cannot_connect(encrypted, context):
    receiver = MessageReceiver(context, "tcp://127.0.0.1:*", SERIALIZER)
    monitor = receiver.socket.get_monitor_socket()
    channels.encrypt_tcp_endpoints("another secret, 24 chars")
    sender = MessageSender(context, receiver.endpoint, SERIALIZER)
    sender.send(AbortReq("forged"))
    assert failed_handshake_then_nothing(receiver, monitor) == []


def test_ipc_endpoints_and_one_host_stay_plain(context, tmp_path, encrypted):
    receiver = MessageReceiver(context, f"ipc://{tmp_path}/edge", SERIALIZER)
    assert receiver.socket.mechanism == zmq.NULL
    encrypt_tcp_endpoints(None)
    assert MessageReceiver(context, "tcp://127.0.0.1:*", SERIALIZER).socket.mechanism == zmq.NULL
