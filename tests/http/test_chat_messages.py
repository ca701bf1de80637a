from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.http.chat_messages import parse_messages


def test_messages_are_normalized_for_the_template():
    messages = parse_messages(
        [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "name": "ignored"},
        ]
    )
    assert messages == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": ""},
    ]


@pytest.mark.parametrize(
    "messages, param",
    [
        ([], "messages"),
        ("hi", "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": None}], "messages[0].content"),  # null only on an assistant turn
        ([{"role": "system", "content": "a\ud800"}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}], "messages[0].content[0].text"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
    ],
)
def test_bad_messages_name_the_param(messages, param):
    with pytest.raises(RequestError) as info:
        parse_messages(messages)
    assert info.value.status_code == 400 and info.value.param == param
