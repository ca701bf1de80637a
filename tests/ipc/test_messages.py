from dataclasses import dataclass

import pytest

from tercet.ipc.message_check import MalformedMessageError, check_message
from tercet.ipc.messages import CORE_MESSAGE_TYPES, AbortReq, FinishKind, FinishReason, MessageRegistry, UnknownMessageError
from tercet.plugins.msgpack_serializer import MsgpackSerializer


def test_registry_maps_both_ways():
    registry = MessageRegistry(CORE_MESSAGE_TYPES)
    assert registry.tag_of(AbortReq("x")) == "tercet.abort_req"
    assert registry.type_of("tercet.abort_req") is AbortReq


def test_unknown_types_and_tags_are_errors():
    registry = MessageRegistry(CORE_MESSAGE_TYPES)

    @dataclass
    class Stranger:
        pass

    with pytest.raises(UnknownMessageError, match="Stranger"):
        registry.tag_of(Stranger())
    with pytest.raises(UnknownMessageError, match="no.such"):
        registry.type_of("no.such")


def test_only_dataclasses_can_be_registered():
    with pytest.raises(TypeError, match="dataclass"):
        MessageRegistry({"x": dict})


def test_finish_reason_json():
    assert FinishReason("stop", matched_token=2).to_json() == {"type": "stop", "matched": 2}
    assert FinishReason("length").to_json() == {"type": "length"}


def test_a_finish_kind_given_by_its_name_becomes_the_enum_and_travels_as_one():
    assert FinishReason("stop").kind is FinishKind.STOP
    assert FinishReason(FinishKind.ABORT) == FinishReason("abort")
    assert str(FinishKind.LENGTH) == "length" and f"{FinishKind.LENGTH}" == "length"
    serializer = MsgpackSerializer(MessageRegistry(dict(CORE_MESSAGE_TYPES)))
    decoded = serializer.decode(serializer.encode(FinishReason(FinishKind.LENGTH)))
    assert decoded.kind is FinishKind.LENGTH


def test_a_finish_kind_that_is_not_one_is_refused_by_the_message_check():
    with pytest.raises(MalformedMessageError, match="kind: expected FinishKind, got str"):
        check_message(FinishReason("finished"))
