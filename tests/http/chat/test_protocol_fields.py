"""The field helpers the Anthropic and Responses translations share."""

import pytest

from tercet.errors import RequestError
from tercet.http.chat.protocol_fields import checked_string, finished_chat_body, given_fields, translated


def test_given_fields_leaves_out_what_is_missing_or_null():
    body = {"temperature": 0.5, "top_p": None, "user": "u"}
    assert given_fields(body, ["temperature", "top_p", "top_k"]) == {"temperature": 0.5}


def test_translated_calls_the_translation_only_for_a_sent_field():
    assert translated({"stop": ["a"]}, "stop", lambda value: value + ["b"]) == ["a", "b"]
    assert translated({"stop": None}, "stop", pytest.fail) is None
    assert translated({}, "stop", pytest.fail) is None


def test_finished_chat_body_adds_the_fields_with_a_value_and_the_stream_fields():
    chat = finished_chat_body({"messages": []}, {"stream": True}, stop=["x"], user=None)
    assert chat == {"messages": [], "stop": ["x"], "stream": True, "stream_options": {"include_usage": True}}
    assert finished_chat_body({"messages": []}, {}, user=None) == {"messages": []}


def test_checked_string_names_the_field():
    with pytest.raises(RequestError) as refused:
        checked_string("", "system[0].text")
    assert refused.value.param == "system[0].text"
