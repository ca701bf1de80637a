from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.http.openai.chat_messages import parse_messages


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
        ([{"role": "function", "content": "x"}], "messages[0].role"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "tool", "content": None, "tool_call_id": "c"}], "messages[0].content"),
        ([{"role": "assistant", "tool_calls": {"id": "c"}}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "code", "function": {"name": "f"}}]}],
         "messages[0].tool_calls[0].type"),
        ([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}],
         "messages[0].tool_calls[0].id"),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": ""}}]}],
         "messages[0].tool_calls[0].function.name"),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}],
         "messages[0].tool_calls[0].function.arguments"),
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


def test_tool_turns_keep_their_calls_and_ids():
    messages = parse_messages([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "18 C"}]},
    ])
    assert messages[1] == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    }
    assert messages[2] == {"role": "tool", "content": "18 C", "tool_call_id": "call_1"}
