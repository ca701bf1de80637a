"""The field checks every parser shares: integers, text UTF-8 can encode, values shown short in errors.

The ranges (IntRange, NumberRange) are tested through the table built of them, in test_sampling_params.py.
"""

from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.field_checks import check_non_empty_text, check_text, check_texts, is_integer, shown


def test_check_text_names_the_position():
    check_text("naïve ✓", "prompt")
    with pytest.raises(RequestError, match=r"lone surrogate '\\ud800' at position 2") as info:
        check_text("ab\ud800", "prompt")
    assert info.value.param == "prompt"


def test_shown_is_short_and_cannot_fail():
    deep = []
    for _ in range(10_000):  # past what the builtin repr can recurse through
        deep = [deep]
    assert len(shown(deep)) < 100
    assert len(shown("x" * 1_000_000)) < 100
    assert shown("\ud800") == "'\\ud800'"
    assert shown(21) == "21"


def test_a_bool_is_not_an_integer():
    assert is_integer(3) and is_integer(-(1 << 70))
    assert not any(is_integer(value) for value in (True, False, 3.0, "3", None))


def test_check_texts_names_the_position():
    check_texts(["a", "b"], "prompt")
    with pytest.raises(RequestError, match="position 1") as info:
        check_texts(["a", "b\ud800"], "prompt")
    assert info.value.param == "prompt[1]" and info.value.message.startswith("prompt[1] ")


@pytest.mark.parametrize("value", [None, "", 5, ["a"]])
def test_check_non_empty_text_refuses_anything_but_a_non_empty_string(value):
    with pytest.raises(RequestError, match="^rid must be a non-empty string$") as info:
        check_non_empty_text(value, "rid")
    assert info.value.param == "rid"


def test_check_non_empty_text_checks_the_text_too():
    check_non_empty_text("r1", "rid")
    with pytest.raises(RequestError, match="lone surrogate"):
        check_non_empty_text("r\ud800", "rid")
