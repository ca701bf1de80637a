"""Both built-in serializers round-trip every core message and refuse strangers."""

import pickle
from dataclasses import dataclass

import msgpack
import pytest

from tercet.ipc.decode_limits import DecodeLimits, MessageOverLimitsError
from tercet.ipc.messages import (
    CORE_MESSAGE_TYPES,
    AbortReq,
    BatchStrOutput,
    BatchTokenIDOutput,
    DetokenizeParams,
    FinishReason,
    MessageRegistry,
    TokenizedGenerateReq,
    TokenLogprobs,
    UnknownMessageError,
)
from tercet.plugins.msgpack_serializer import MESSAGE_EXT_CODE, MsgpackSerializer
from tercet.plugins.pickle_serializer import PickleSerializer
from tercet.sampling_params import SamplingParams

REGISTRY = MessageRegistry(CORE_MESSAGE_TYPES)

MESSAGES = [
    TokenizedGenerateReq("r1", [1, 2, 3], SamplingParams(max_new_tokens=5, temperature=0.0, seed=7, stop_token_ids=[2]), True),
    AbortReq("r1"),
    BatchTokenIDOutput(
        ["a", "b"], [[1], [2, 3]], [None, FinishReason("stop", matched_token=2)], [3, 4], [1, 2],
        [DetokenizeParams(True, ["\n\n", "END"], False), None],
        [TokenLogprobs([1], [-0.5], [[[1, -0.5], [7, -1.25]]]), None],
        [TokenLogprobs([5, 6, 7], [None, -2.0, -3.5], [[], [], []]), None],
        [0, 16],
    ),
    BatchStrOutput(
        ["a"], ["héllo 你好 🙂"], [[9]], [FinishReason("stop", matched_text="END")], [1], [1], [None], [None], [0]
    ),
    TokenizedGenerateReq("r2", [1], SamplingParams(logit_bias={5: -100.0, 7: 2.5}, stop=["x"], n=2), priority=3, tenant="acme"),
]


@dataclass
class NotRegistered:
    x: int


@pytest.mark.parametrize("serializer_class", [MsgpackSerializer, PickleSerializer])
@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(serializer_class, message):
    serializer = serializer_class(REGISTRY)
    assert serializer.decode(serializer.encode(message)) == message


@pytest.mark.parametrize("serializer_class", [MsgpackSerializer, PickleSerializer])
def test_unregistered_types_are_refused_both_ways(serializer_class):
    serializer = serializer_class(REGISTRY)
    with pytest.raises(UnknownMessageError):
        serializer.encode(NotRegistered(1))


def test_msgpack_decodes_only_registered_tags():
    serializer = MsgpackSerializer(REGISTRY)
    forged = msgpack.packb(msgpack.ExtType(MESSAGE_EXT_CODE, msgpack.packb(["os.system", "echo hi"])))
    with pytest.raises(UnknownMessageError, match="os.system"):
        serializer.decode(forged)
    with pytest.raises(UnknownMessageError, match="not a registered message"):
        serializer.decode(msgpack.packb({"plain": "dict"}))


def test_pickle_refuses_unregistered_objects():
    with pytest.raises(UnknownMessageError):
        PickleSerializer(REGISTRY).decode(pickle.dumps({"plain": "dict"}))


def nested_messages(depth: int) -> bytes:
    """``depth`` + 1 AbortReq messages, each the rid of the one around it."""
    frame = msgpack.packb(msgpack.ExtType(MESSAGE_EXT_CODE, msgpack.packb(["tercet.abort_req", "x"])))
    for _ in range(depth):
        frame = msgpack.packb(msgpack.ExtType(MESSAGE_EXT_CODE, b"\x92" + msgpack.packb("tercet.abort_req") + frame))
    return frame


def test_msgpack_refuses_messages_nested_past_the_limit_before_recursing():
    serializer = MsgpackSerializer(REGISTRY)
    # 300 levels in 6.6 KB: each is one more recursive unpackb, and this many overflowed the C stack.
    crash = nested_messages(300)
    assert len(crash) < 7000
    with pytest.raises(MessageOverLimitsError, match="messages nested more than 16 deep"):
        serializer.decode(crash)
    assert isinstance(serializer.decode(nested_messages(15)), AbortReq)  # 16 messages: within the limit
    with pytest.raises(MessageOverLimitsError):
        serializer.decode(nested_messages(16))


def test_msgpack_refuses_deep_containers_inside_a_message():
    serializer = MsgpackSerializer(REGISTRY)
    too_deep = msgpack.packb(msgpack.ExtType(MESSAGE_EXT_CODE, msgpack.packb(["tercet.abort_req", [[[[[[[["x"]]]]]]]]])))
    assert serializer.decode(too_deep).rid == [[[[[[[["x"]]]]]]]]  # within 64: decoded (the receiver's field check drops it)
    deeper = msgpack.ExtType(MESSAGE_EXT_CODE, b"\x92" + msgpack.packb("tercet.abort_req") + b"\x91" * 1000 + b"\x00")
    with pytest.raises(MessageOverLimitsError, match="nested more than 64 deep"):
        serializer.decode(msgpack.packb(deeper))


@pytest.mark.parametrize("serializer_class", [MsgpackSerializer, PickleSerializer])
def test_frames_over_max_bytes_are_refused_both_ways(serializer_class):
    serializer = serializer_class(MessageRegistry(CORE_MESSAGE_TYPES, DecodeLimits(max_bytes=1000)))
    small, large = AbortReq("a" * 10), AbortReq("a" * 2000)
    assert serializer.decode(serializer.encode(small)) == small
    with pytest.raises(MessageOverLimitsError, match="over the limit of 1000 bytes"):
        serializer.encode(large)
    with pytest.raises(MessageOverLimitsError, match="over the limit of 1000 bytes"):
        serializer.decode(serializer_class(REGISTRY).encode(large))


def test_pickle_refuses_deep_and_cyclic_values():
    serializer = PickleSerializer(REGISTRY)
    cycle: list = []
    cycle.append(cycle)
    deep: list = []
    for _ in range(100):
        deep = [deep]
    for value in (cycle, deep):
        with pytest.raises(MessageOverLimitsError, match="nested more than 64 deep"):
            serializer.decode(pickle.dumps(AbortReq(value)))
