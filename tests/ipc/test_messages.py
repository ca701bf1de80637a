from dataclasses import dataclass

import pytest

from tercet.ipc.messages import CORE_MESSAGE_TYPES, AbortReq, FinishReason, MessageRegistry, UnknownMessageError


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
