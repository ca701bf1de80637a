"""DecodeLimits: size, nested messages and depth, checked without recursion and ending on shared or cyclic values."""

import enum
from dataclasses import dataclass

import pytest

from tercet.ipc.decode_limits import DecodeLimits, MessageOverLimitsError
from tercet.ipc.messages import AbortReq, BatchTokenIDOutput, DetokenizeParams, FinishKind, FinishReason, TokenLogprobs

LIMITS = DecodeLimits(max_bytes=100, max_depth=8, max_nested_messages=3)


def nested_lists(depth: int):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_frame_over_max_bytes_is_refused():
    LIMITS.check_size(b"x" * 100)
    with pytest.raises(MessageOverLimitsError, match="101 bytes is over the limit of 100 bytes"):
        LIMITS.check_size(b"x" * 101)


def test_nested_messages_are_refused_past_the_limit():
    LIMITS.check_nested_messages(3)
    with pytest.raises(MessageOverLimitsError, match="nested more than 3 deep"):
        LIMITS.check_nested_messages(4)


def test_depth_counts_containers_and_messages_along_one_path():
    LIMITS.check_depth(nested_lists(8))
    LIMITS.check_depth(AbortReq(nested_lists(7)))  # the message is the eighth level
    for too_deep in (nested_lists(9), AbortReq(nested_lists(8)), {"k": nested_lists(8)}, (nested_lists(8),),
                     [[[[[[[[set()]]]]]]]], [[[[[[[frozenset([()])]]]]]]]):
        with pytest.raises(MessageOverLimitsError, match="nested more than 8 deep"):
            LIMITS.check_depth(too_deep)


def test_values_that_hold_nothing_end_a_path_whatever_their_type():
    class Colour(enum.Enum):
        RED = 1

    def in_lists(depth: int, innermost: list):
        for _ in range(depth - 1):
            innermost = [innermost]
        return innermost

    LIMITS.check_depth(in_lists(8, [Colour.RED, FinishKind.STOP, 2.5, b"x", None]))  # eight levels
    with pytest.raises(MessageOverLimitsError):
        LIMITS.check_depth(in_lists(8, [Colour.RED, []]))


def test_a_deep_value_is_checked_without_recursion():
    with pytest.raises(MessageOverLimitsError):
        DecodeLimits().check_depth(nested_lists(200_000))


def test_cycles_end_at_the_limit_and_shared_values_are_walked_once_per_depth():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(MessageOverLimitsError):
        LIMITS.check_depth(cycle)
    shared = []
    for _ in range(7):  # 2**7 paths, eight levels
        shared = [shared, shared]
    LIMITS.check_depth(shared)
    with pytest.raises(MessageOverLimitsError):
        LIMITS.check_depth([shared])


def test_subclasses_of_containers_are_walked_like_their_base():
    class Tokens(list):
        pass

    @dataclass
    class Wrapper:
        inner: object

    with pytest.raises(MessageOverLimitsError):
        LIMITS.check_depth(Tokens([nested_lists(8)]))
    LIMITS.check_depth(Wrapper(Tokens(range(10_000))))


def test_every_core_message_is_far_below_the_default_limits():
    batch = BatchTokenIDOutput(
        ["a"], [[1, 2]], [FinishReason("stop")], [3], [2], [DetokenizeParams(True, ["x"])],
        [TokenLogprobs([1], [-0.5], [[[1, -0.5], [7, -1.25]]])], [None], [0],
    )
    DecodeLimits(max_depth=6).check_depth(batch)
