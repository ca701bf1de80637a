from __future__ import annotations

import pytest

from tercet.errors import RequestError
from tercet.http.openai_protocol import (
    chat_completion_chunk,
    chat_completion_response,
    completion_chunk,
    completion_response,
    openai_finish_reason,
    parse_chat_completion_request,
    parse_completion_request,
    parse_messages,
    usage_chunk,
)
from tercet.io_struct import GenerateOutput
from tercet.messages import FinishReason

MODEL = "served-model"
CONTEXT_LEN = 100


def fake_chat_template(messages: list[dict]) -> list[int]:
    # Ten tokens per message is enough to check the "fill the context" default.
    return [7] * (10 * len(messages))


def parse_completion(**body):
    return parse_completion_request({"model": MODEL, **body}, MODEL)


def parse_chat(**body):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    return parse_chat_completion_request(body, MODEL, CONTEXT_LEN, fake_chat_template)


def error_of(parse, **body) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(**body)
    return info.value


# -- completions requests -------------------------------------------------------


def test_completion_defaults_follow_openai():
    request = parse_completion(prompt="Once upon")
    generate = request.generate_request
    assert generate.text == "Once upon" and generate.input_ids is None
    assert generate.sampling_params.max_new_tokens == 16
    assert generate.sampling_params.temperature == 1.0
    assert generate.sampling_params.top_p == 1.0
    assert generate.sampling_params.seed is None
    assert generate.stream is False and request.include_usage is False
    assert request.id.startswith("cmpl-") and generate.rid == request.id
    assert request.model == MODEL and isinstance(request.created, int)


def test_completion_sampling_parameters_pass_through_and_null_means_default():
    params = parse_completion(prompt="x", max_tokens=5, temperature=0, top_p=0.5, seed=3).generate_request.sampling_params
    assert (params.max_new_tokens, params.temperature, params.top_p, params.seed) == (5, 0, 0.5, 3)
    params = parse_completion(prompt="x", temperature=None, max_tokens=None).generate_request.sampling_params
    assert (params.temperature, params.max_new_tokens) == (1.0, 16)


@pytest.mark.parametrize(
    "prompt, text, input_ids",
    [
        ([1, 2, 3], None, [1, 2, 3]),
        ([[4, 5]], None, [4, 5]),
        (["only one"], "only one", None),
        ("", "", None),
    ],
)
def test_prompt_forms(prompt, text, input_ids):
    generate = parse_completion(prompt=prompt).generate_request
    assert (generate.text, generate.input_ids) == (text, input_ids)


@pytest.mark.parametrize(
    "prompt, fragment",
    [
        (["a", "b"], "one prompt per request"),
        ([[1], [2]], "one prompt per request"),
        ([], "non-empty"),
        (None, "required"),
        (5, "must be a string"),
        ([1, -2], "must be a string"),
    ],
)
def test_bad_prompts_are_rejected_with_param(prompt, fragment):
    error = error_of(parse_completion, prompt=prompt)
    assert error.status_code == 400 and error.param == "prompt" and fragment in error.message


def test_missing_model_means_the_served_one():
    request = parse_completion_request({"prompt": "x"}, MODEL)
    assert request.model == MODEL


def test_other_model_is_404_model_not_found():
    error = error_of(parse_completion, prompt="x", model="gpt-4")
    assert error.status_code == 404 and error.code == "model_not_found" and error.param == "model"
    assert "gpt-4" in error.message and MODEL in error.message


@pytest.mark.parametrize(
    "field, value, param",
    [
        ("temperature", -1, "temperature"),
        ("temperature", "hot", "temperature"),
        ("top_p", 0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("max_tokens", -1, "max_tokens"),
        ("max_tokens", 2.5, "max_tokens"),
        ("seed", "abc", "seed"),
        ("stream", "yes", "stream"),
        ("n", 0, "n"),
        ("n", "two", "n"),
    ],
)
def test_bad_parameters_name_the_param(field, value, param):
    error = error_of(parse_completion, prompt="x", **{field: value})
    assert error.status_code == 400 and error.param == param


def test_n_above_one_is_refused_clearly():
    error = error_of(parse_completion, prompt="x", n=3)
    assert error.param == "n" and "not supported" in error.message
    assert parse_completion(prompt="x", n=1).generate_request.text == "x"


def test_stream_options():
    request = parse_completion(prompt="x", stream=True, stream_options={"include_usage": True})
    assert request.stream and request.include_usage
    assert error_of(parse_completion, prompt="x", stream_options={"include_usage": True}).param == "stream_options"
    assert error_of(parse_completion, prompt="x", stream=True, stream_options=[]).param == "stream_options"


def test_unknown_fields_are_ignored():
    request = parse_completion(prompt="x", frequency_penalty=0.5, user="someone")
    assert request.generate_request.text == "x"


# -- chat requests --------------------------------------------------------------


def test_chat_templates_messages_and_fills_the_context_by_default():
    request = parse_chat(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    generate = request.generate_request
    assert generate.input_ids == [7] * 20 and generate.text is None
    assert generate.sampling_params.max_new_tokens == CONTEXT_LEN - 20
    assert request.id.startswith("chatcmpl-") and generate.rid == request.id


def test_chat_max_completion_tokens_wins_over_max_tokens():
    assert parse_chat(max_tokens=9).generate_request.sampling_params.max_new_tokens == 9
    params = parse_chat(max_tokens=9, max_completion_tokens=4).generate_request.sampling_params
    assert params.max_new_tokens == 4


def test_chat_prompt_that_fills_the_context_is_a_clear_400():
    messages = [{"role": "user", "content": "x"}] * 10  # 100 tokens: no room left
    error = error_of(parse_chat, messages=messages)
    assert error.param == "messages" and "100 tokens" in error.message


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
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
    ],
)
def test_bad_messages_name_the_param(messages, param):
    error = error_of(parse_chat, messages=messages)
    assert error.status_code == 400 and error.param == param


# -- responses ------------------------------------------------------------------


def output(text="Hello", finish=FinishReason("length")) -> GenerateOutput:
    return GenerateOutput("rid", text, [1, 2, 3], finish, prompt_tokens=4, completion_tokens=3)


def test_finish_reason_mapping():
    assert openai_finish_reason(None) is None
    assert openai_finish_reason(FinishReason("stop", matched_token=2)) == "stop"
    assert openai_finish_reason(FinishReason("length")) == "length"
    assert openai_finish_reason(FinishReason("abort", message="bye")) == "abort"


def test_completion_response_schema():
    request = parse_completion(prompt="x")
    assert completion_response(request, output()) == {
        "id": request.id,
        "object": "text_completion",
        "created": request.created,
        "model": MODEL,
        "choices": [{"index": 0, "text": "Hello", "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
    }


def test_chat_completion_response_schema():
    request = parse_chat()
    body = chat_completion_response(request, output(finish=FinishReason("stop")))
    assert body["object"] == "chat.completion" and body["id"] == request.id
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "logprobs": None, "finish_reason": "stop"}
    ]
    assert body["usage"]["total_tokens"] == 7


def test_chunks_carry_null_usage_only_when_usage_is_requested():
    plain = parse_completion(prompt="x", stream=True)
    assert "usage" not in completion_chunk(plain, "He")
    with_usage = parse_chat(stream=True, stream_options={"include_usage": True})
    chunk = chat_completion_chunk(with_usage, {"content": "He"})
    assert chunk["usage"] is None and chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"] == [{"index": 0, "delta": {"content": "He"}, "logprobs": None, "finish_reason": None}]
    last = usage_chunk(with_usage, "chat.completion.chunk", output())
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
