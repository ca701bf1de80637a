"""Refusing an output constraint over grammar.max_constraint_bytes."""

import pytest

from tercet.errors import RequestError
from tercet.frontend.constraint_size import check_constraint_size
from tercet.sampling_params import SamplingParams


def test_a_constraint_within_the_limit_passes():
    check_constraint_size(SamplingParams(regex="a" * 10), 10)
    check_constraint_size(SamplingParams(), 1)


def test_a_constraint_over_the_limit_is_a_400_naming_it():
    with pytest.raises(RequestError) as refusal:
        # Counted in UTF-8 bytes: five characters, ten bytes.
        check_constraint_size(SamplingParams(json_schema='"ééééé"'), 11)
    assert refusal.value.status_code == 400 and refusal.value.param == "json_schema"
    assert "12 bytes" in refusal.value.message and "grammar.max_constraint_bytes" in refusal.value.message
