"""SamplingParams.validate: every field's range comes from FIELD_RANGES, and what passes can be sent."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from tercet.errors import RequestError
from tercet.field_checks import IntRange, NumberRange
from tercet.sampling_params import (
    FIELD_RANGES,
    INT64_MIN,
    OPENAI_PARAM_NAMES,
    TOKEN_ID,
    UINT64_MAX,
    SamplingParams,
)

VOCAB_SIZE = 1000


def params_with(name: str, value) -> SamplingParams:
    """Defaults with ``name`` set to ``value`` (as one id or bias for the list and map fields)."""
    if name == "stop_token_ids":
        return SamplingParams(stop_token_ids=[value])
    if name == "logit_bias":
        return SamplingParams(logit_bias={1: value})
    # min may not exceed max
    extra = {"max_new_tokens": FIELD_RANGES["max_new_tokens"].maximum} if name == "min_new_tokens" else {}
    return SamplingParams(**{name: value, **extra})


def edges(value_range: IntRange | NumberRange, vocab_size: int | None):
    """Values at the range's edges (accepted) and just past them (refused)."""
    if isinstance(value_range, IntRange):
        maximum = value_range.maximum_for(vocab_size)
        return [value_range.minimum, maximum], [value_range.minimum - 1, maximum + 1]
    low = value_range.minimum + 1e-3 if value_range.exclusive_minimum else value_range.minimum
    too_low = value_range.minimum if value_range.exclusive_minimum else value_range.minimum - 1e-3
    return [low, value_range.maximum], [too_low, value_range.maximum + 1e-3]


@pytest.mark.parametrize("vocab_size", [VOCAB_SIZE, None])
@pytest.mark.parametrize("name", list(FIELD_RANGES))
def test_validate_checks_every_range_in_the_table(name, vocab_size):
    inside, outside = edges(FIELD_RANGES[name], vocab_size)
    for value in inside:
        params_with(name, value).validate(vocab_size)
    for value in outside:
        with pytest.raises(RequestError) as info:
            params_with(name, value).validate(vocab_size)
        assert info.value.param == OPENAI_PARAM_NAMES.get(name, name)


def test_every_field_of_a_number_type_has_a_range():
    numeric = {f.name for f in dataclasses.fields(SamplingParams) if f.type in ("int", "float", "int | None")}
    assert len(numeric) > 10 and numeric <= set(FIELD_RANGES)


INTEGER_FIELDS = [name for name, value_range in FIELD_RANGES.items() if isinstance(value_range, IntRange)]


@pytest.mark.parametrize("name", INTEGER_FIELDS)
def test_every_accepted_integer_can_be_sent(name):
    # msgpack carries 64 bits; the scheduler's tensors are int64 (seeds only ever seed a generator).
    value_range = FIELD_RANGES[name]
    assert value_range.minimum >= INT64_MIN
    assert value_range.maximum <= (UINT64_MAX if name == "seed" else (1 << 63) - 1)
    for value in (value_range.minimum, value_range.maximum):
        msgpack.packb(dataclasses.asdict(params_with(name, value)), strict_types=False)


@pytest.mark.parametrize("top_k", [1 << 63, 1 << 64, VOCAB_SIZE + 1])
def test_top_k_stops_at_the_vocabulary(top_k):
    SamplingParams(top_k=VOCAB_SIZE, temperature=1.0).validate(VOCAB_SIZE)
    with pytest.raises(RequestError, match=f"top_k must be an integer from -1 to {VOCAB_SIZE}"):
        SamplingParams(top_k=top_k, temperature=1.0).validate(VOCAB_SIZE)


def test_token_ids_stop_below_the_vocabulary():
    assert TOKEN_ID.maximum_for(VOCAB_SIZE) == VOCAB_SIZE - 1
    with pytest.raises(RequestError, match="each logit_bias key"):
        SamplingParams(logit_bias={VOCAB_SIZE: 1.0}).validate(VOCAB_SIZE)
    with pytest.raises(RequestError, match="each token id in stop_token_ids"):
        SamplingParams(stop_token_ids=[1 << 64]).validate(None)


@pytest.mark.parametrize("stop", [["\ud800"], ["fine", "x\udfffy"]])
def test_a_stop_string_must_be_encodable(stop):
    with pytest.raises(RequestError, match="lone surrogate") as info:
        SamplingParams(stop=stop).validate()
    assert info.value.param == "stop"
