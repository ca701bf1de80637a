"""Decoded messages are checked against their dataclass annotations."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tercet.ipc.control_messages import ControlReply, FlushCacheReq
from tercet.ipc.message_check import MalformedMessageError, check_message
from tercet.ipc.messages import (
    BatchTokenIDOutput,
    DetokenizeParams,
    FinishReason,
    TokenizedGenerateReq,
    TokenLogprobs,
)
from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class Everything:
    count: int
    ratio: float
    name: str
    flag: bool
    maybe: int | None
    ids: list[int]
    pairs: tuple[int, str]
    many: tuple[float, ...]
    scores: dict[int, float]
    nested: FinishReason
    loose: object = None
    rows: list[list[int]] = field(default_factory=list)


def valid(**changes) -> Everything:
    values = dict(count=1, ratio=0.5, name="x", flag=True, maybe=None, ids=[1, 2], pairs=(1, "a"), many=[1.0, 2],
                  scores={3: 1.5}, nested=FinishReason("stop"), rows=[[1], []])
    return Everything(**{**values, **changes})


def test_a_message_whose_fields_fit_passes():
    check_message(valid())
    check_message(valid(maybe=3, ratio=2, pairs=[1, "a"]))  # an int is a number; a list stands for a tuple
    check_message(TokenizedGenerateReq("r", [1, 2], SamplingParams(seed=3, stop=["x"], logit_bias={5: -1.0})))
    check_message(ControlReply("id", 0, True, None, {"anything": [1, "x"]}))
    check_message(FlushCacheReq("id"))


@pytest.mark.parametrize("changes, expected", [
    (dict(count=True), "Everything.count: expected int, got bool"),
    (dict(count=1.0), "Everything.count: expected int, got float"),
    (dict(ratio="1"), "Everything.ratio: expected a number, got str"),
    (dict(flag=1), "Everything.flag: expected bool, got int"),
    (dict(maybe="3"), "Everything.maybe: expected int | NoneType, got str"),
    (dict(ids=[1, "2"]), "Everything.ids[1]: expected int, got str"),
    (dict(ids="12"), "Everything.ids: expected list, got str"),
    (dict(pairs=(1, 2)), "Everything.pairs[1]: expected str, got int"),
    (dict(pairs=(1,)), "Everything.pairs: expected 2 items"),
    (dict(many=[1.0, None]), "Everything.many[1]: expected a number, got NoneType"),
    (dict(scores={"3": 1.0}), "Everything.scores key '3': expected int, got str"),
    (dict(scores={3: "x"}), "Everything.scores[3]: expected a number, got str"),
    (dict(nested=5), "Everything.nested: expected FinishReason, got int"),
    (dict(nested=FinishReason(7)), "Everything.nested.kind: expected FinishKind, got int"),
    (dict(rows=[[1], ["x"]]), "Everything.rows[1][0]: expected int, got str"),
])
def test_the_first_field_that_does_not_fit_is_named(changes, expected):
    with pytest.raises(MalformedMessageError) as raised:
        check_message(valid(**changes))
    assert str(raised.value).startswith(expected)


def test_the_forged_messages_of_the_containment_review_are_refused():
    with pytest.raises(MalformedMessageError, match="sampling_params: expected SamplingParams, got int"):
        check_message(TokenizedGenerateReq("r", [1], 5))
    output = BatchTokenIDOutput(["r"], [[1]], [None], [1], [1], [DetokenizeParams(stop="x")], [None], [None], [0])
    with pytest.raises(MalformedMessageError, match=r"detokenize_params\[0\]"):
        check_message(output)
    with pytest.raises(MalformedMessageError, match="logprobs"):
        check_message(TokenLogprobs([1], ["-0.5"], [[]]))


def test_a_subclass_is_checked_by_its_own_fields():
    @dataclass(frozen=True)
    class LoudFinish(FinishReason):
        volume: int = 0

    check_message(valid(nested=LoudFinish("stop", volume=3)))
    with pytest.raises(MalformedMessageError, match="nested.volume"):
        check_message(valid(nested=LoudFinish("stop", volume="loud")))


def test_fields_whose_annotations_cannot_be_resolved_are_not_checked():
    @dataclass(frozen=True)
    class Unresolvable:
        thing: "NoSuchType"  # noqa: F821
        count: int = 0

    check_message(Unresolvable(object(), "not checked either"))
