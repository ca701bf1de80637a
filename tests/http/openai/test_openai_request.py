from __future__ import annotations

import asyncio

import pytest

from tercet.errors import RequestError
from tercet.http.openai.openai_request import parse_chat_completion_request, parse_completion_request

MODEL = "served-model"
CONTEXT_LEN = 100
VOCAB_SIZE = 1000


async def fake_chat_template(messages: list[dict], max_new_tokens: int, tools=None, generation_prefix="") -> list[int]:
    # Ten tokens per message is enough to check the "fill the context" default.
    return [7] * (10 * len(messages))


def parse_completion(**body):
    return parse_completion_request({"model": MODEL, **body}, MODEL, VOCAB_SIZE)


def parse_chat(**body):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    return asyncio.run(parse_chat_completion_request(body, MODEL, CONTEXT_LEN, fake_chat_template, VOCAB_SIZE))


def completion_params(**body):
    return parse_completion(prompt="x", **body).generate_request.sampling_params


def chat_params(**body):
    return parse_chat(**body).generate_request.sampling_params


def error_of(parse, **body) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(**body)
    return info.value


# -- completions requests -------------------------------------------------------


def test_completion_defaults_follow_openai():
    request = parse_completion(prompt="Once upon")
    generate = request.generate_request
    params = generate.sampling_params
    assert generate.text == "Once upon" and generate.input_ids is None
    assert (params.max_new_tokens, params.temperature, params.top_p, params.seed, params.n) == (16, 1.0, 1.0, None, 1)
    assert (params.stop, params.logit_bias, params.return_logprob, params.return_prompt_logprob) == ([], {}, False, False)
    assert generate.stream is False and request.include_usage is False and request.echo is False
    assert request.id.startswith("cmpl-") and generate.rid == request.id
    assert request.model == MODEL and isinstance(request.created, int)


def test_every_sampling_parameter_maps_to_its_field():
    params = completion_params(
        max_tokens=5, min_tokens=2, temperature=0.5, top_p=0.5, top_k=40, min_p=0.1,
        frequency_penalty=0.5, presence_penalty=-0.5, repetition_penalty=1.2, seed=3,
        stop=["\n", "END"], stop_token_ids=[2, 3], ignore_eos=True, skip_special_tokens=False,
        no_stop_trim=True, logit_bias={"17": 100, "42": -100}, n=3,
    )
    assert params.max_new_tokens == 5 and params.min_new_tokens == 2
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (0.5, 0.5, 40, 0.1)
    assert (params.frequency_penalty, params.presence_penalty, params.repetition_penalty) == (0.5, -0.5, 1.2)
    assert params.seed == 3 and params.stop == ["\n", "END"] and params.stop_token_ids == [2, 3]
    assert params.ignore_eos and not params.skip_special_tokens and params.no_stop_trim
    assert params.logit_bias == {17: 100, 42: -100} and params.n == 3


def test_null_means_default():
    params = completion_params(temperature=None, max_tokens=None, stop=None, logit_bias=None, n=None, logprobs=None)
    assert (params.temperature, params.max_new_tokens, params.stop, params.logit_bias, params.n) == (1.0, 16, [], {}, 1)
    assert not params.return_logprob


def test_a_single_stop_string_becomes_a_list():
    assert completion_params(stop="###").stop == ["###"]


@pytest.mark.parametrize(
    "logprobs, echo, expected",
    [
        (None, False, (False, 0, False)),
        (0, False, (True, 0, False)),
        (5, False, (True, 5, False)),
        (20, True, (True, 20, True)),
        (None, True, (False, 0, False)),  # echo alone needs no log-probabilities
    ],
)
def test_completion_logprobs_and_echo(logprobs, echo, expected):
    request = parse_completion(prompt="x", logprobs=logprobs, echo=echo)
    params = request.generate_request.sampling_params
    assert (params.return_logprob, params.top_logprobs_num, params.return_prompt_logprob) == expected
    assert request.echo is echo


def test_lm_eval_loglikelihood_request():
    # What lm-eval's local-completions model sends for a loglikelihood request.
    request = parse_completion(prompt=[[5, 6, 7]], echo=True, logprobs=1, max_tokens=0, temperature=0, seed=1234)
    params = request.generate_request.sampling_params
    assert request.generate_request.input_ids == [5, 6, 7] and request.echo
    assert params.max_new_tokens == 0 and params.return_prompt_logprob and params.top_logprobs_num == 1


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
    assert (generate.text, generate.input_ids, generate.is_batch) == (text, input_ids, False)


@pytest.mark.parametrize("prompts", [["a", "", "c"], [[1, 2], [3], [4, 5, 6]]])
def test_a_list_of_prompts_is_a_batch_sharing_the_rest(prompts):
    request = parse_completion(prompt=prompts, n=2, max_tokens=3, echo=True, logprobs=1)
    generate = request.generate_request
    assert generate.prompts == prompts and (generate.text, generate.input_ids) == (None, None)
    assert (request.num_prompts, request.n, generate.num_completions, generate.prompt_field) == (3, 2, 6, "prompt")
    # Each prompt runs as if sent alone, with the same parameters and stream flag.
    alone = generate.prompt_requests()
    assert [r.text if isinstance(prompts[0], str) else r.input_ids for r in alone] == prompts
    assert all((r.sampling_params, r.rid, r.is_batch) == (generate.sampling_params, request.id, False) for r in alone)


@pytest.mark.parametrize(
    "prompt, param, fragment",
    [
        (["a", [1]], "prompt", "may not mix"),
        ([[1], "a"], "prompt", "may not mix"),
        ([[1], 2], "prompt", "may not mix"),
        (["a", None], "prompt", "may not mix"),
        ([{"text": "a"}], "prompt", "must be a string"),
        (["a", "b\ud800"], "prompt[1]", "lone surrogate"),
        ([[1], []], "prompt[1]", "prompt[1] must be a non-empty list of token ids"),
        ([[1], [2, 1000]], "prompt[1]", "each token id in prompt[1] must be an integer from 0 to 999"),
        ([[1], [True]], "prompt[1]", "each token id in prompt[1]"),
        ([[[1]], [2]], "prompt[0]", "each token id in prompt[0]"),
    ],
)
def test_bad_prompt_lists_name_the_prompt(prompt, param, fragment):
    error = error_of(parse_completion, prompt=prompt)
    assert error.status_code == 400 and error.param == param and fragment in error.message


@pytest.mark.parametrize(
    "prompt, fragment",
    [
        ([], "non-empty"),
        (None, "required"),
        (5, "must be a string"),
        ([1, -2], "each token id in prompt must be an integer from 0 to 999"),
        ([[1, 1000]], "each token id in prompt must be an integer from 0 to 999"),
        ("\ud800", "lone surrogate"),
        (["a\udfff"], "lone surrogate"),
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
        ("top_k", -2, "top_k"),
        ("top_k", 1.5, "top_k"),
        ("top_k", VOCAB_SIZE + 1, "top_k"),
        ("top_k", 1 << 63, "top_k"),  # past int64: would crash the scheduler's tensor
        ("top_k", 1 << 64, "top_k"),  # past 64 bits: msgpack cannot encode it
        ("min_p", 1.5, "min_p"),
        ("frequency_penalty", 3, "frequency_penalty"),
        ("presence_penalty", -2.5, "presence_penalty"),
        ("repetition_penalty", 0, "repetition_penalty"),
        ("max_tokens", -1, "max_tokens"),
        ("max_tokens", 2.5, "max_tokens"),
        ("max_tokens", 1 << 63, "max_tokens"),
        ("min_tokens", -1, "min_tokens"),
        ("min_tokens", 17, "min_tokens"),  # above the default max_tokens of 16
        ("seed", "abc", "seed"),
        ("seed", 1 << 64, "seed"),
        ("seed", -(1 << 63) - 1, "seed"),
        ("stop", "", "stop"),
        ("stop", [1], "stop"),
        ("stop", {"a": 1}, "stop"),
        ("stop", ["s"] * 17, "stop"),
        ("stop", "\ud800", "stop"),
        ("stop", ["ok", "x\udc00"], "stop"),
        ("stop", [[[[[[[[["deep"]]]]]]]]], "stop"),
        ("stop_token_ids", [VOCAB_SIZE], "stop_token_ids"),
        ("stop_token_ids", 5, "stop_token_ids"),
        ("stop_token_ids", [1 << 64], "stop_token_ids"),
        ("ignore_eos", "yes", "ignore_eos"),
        ("skip_special_tokens", 1, "skip_special_tokens"),
        ("no_stop_trim", "no", "no_stop_trim"),
        ("logit_bias", {"abc": 1}, "logit_bias"),
        ("logit_bias", {"1.5": 1}, "logit_bias"),
        ("logit_bias", {str(VOCAB_SIZE): 1}, "logit_bias"),
        ("logit_bias", {"-1": 1}, "logit_bias"),
        ("logit_bias", {"1" * 5000: 1}, "logit_bias"),  # past int()'s digit limit
        ("logit_bias", {"\u0661": 1}, "logit_bias"),  # ARABIC-INDIC DIGIT ONE: int() reads it, JSON clients do not
        ("logit_bias", {"5": 101}, "logit_bias"),
        ("logit_bias", {"5": "big"}, "logit_bias"),
        ("logit_bias", [1, 2], "logit_bias"),
        ("n", 0, "n"),
        ("n", "two", "n"),
        ("n", 17, "n"),
        ("logprobs", -1, "logprobs"),
        ("logprobs", 21, "logprobs"),
        ("logprobs", True, "logprobs"),
        ("echo", "yes", "echo"),
        ("stream", "yes", "stream"),
        ("suffix", "tail", "suffix"),
        ("best_of", 3, "best_of"),
        ("model", "\ud800", "model"),
        ("model", 5, "model"),
    ],
)
def test_bad_parameters_are_400_naming_the_param(field, value, param):
    error = error_of(parse_completion, prompt="x", **{field: value})
    assert error.status_code == 400 and error.param == param, error.message


def test_best_of_equal_to_n_is_fine():
    assert completion_params(n=2, best_of=2).n == 2


def test_stream_options():
    request = parse_completion(prompt="x", stream=True, stream_options={"include_usage": True})
    assert request.stream and request.include_usage
    # Without stream the options are checked, then ignored.
    request = parse_completion(prompt="x", stream_options={"include_usage": True})
    assert not request.stream and not request.include_usage
    assert error_of(parse_completion, prompt="x", stream_options=[]).param == "stream_options"
    assert error_of(parse_completion, prompt="x", stream=True, stream_options=[]).param == "stream_options"
    error = error_of(parse_completion, prompt="x", stream_options={"include_usage": 1})
    assert error.param == "stream_options.include_usage"


def test_streaming_echo_with_logprobs_and_n_is_accepted():
    request = parse_completion(prompt="x", stream=True, echo=True, logprobs=2, n=2)
    assert request.stream and request.echo and request.n == 2 and request.wants_logprobs


def test_unknown_fields_are_ignored():
    request = parse_completion(prompt="x", user="someone", metadata={"a": 1})
    assert request.generate_request.text == "x"


# -- chat requests --------------------------------------------------------------


def test_chat_templates_messages_and_fills_the_context_by_default():
    request = parse_chat(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    generate = request.generate_request
    assert generate.input_ids == [7] * 20 and generate.text is None
    assert generate.sampling_params.max_new_tokens == CONTEXT_LEN - 20
    assert request.id.startswith("chatcmpl-") and generate.rid == request.id


def test_chat_max_completion_tokens_wins_over_max_tokens():
    assert chat_params(max_tokens=9).max_new_tokens == 9
    assert chat_params(max_tokens=9, max_completion_tokens=4).max_new_tokens == 4
    assert error_of(parse_chat, max_completion_tokens=-1).param == "max_completion_tokens"


def test_chat_takes_the_same_sampling_parameters():
    params = chat_params(stop="x", logit_bias={"3": 5}, n=2, min_tokens=1, max_tokens=4, top_k=3, seed=9)
    assert (params.stop, params.logit_bias, params.n, params.min_new_tokens, params.top_k, params.seed) == (
        ["x"], {3: 5}, 2, 1, 3, 9
    )


@pytest.mark.parametrize(
    "body, expected",
    [
        ({}, (False, 0)),
        ({"logprobs": False}, (False, 0)),
        ({"logprobs": True}, (True, 0)),
        ({"logprobs": True, "top_logprobs": 3}, (True, 3)),
        ({"logprobs": False, "top_logprobs": 0}, (False, 0)),
    ],
)
def test_chat_logprobs(body, expected):
    params = chat_params(**body)
    assert (params.return_logprob, params.top_logprobs_num) == expected
    assert not params.return_prompt_logprob


@pytest.mark.parametrize(
    "body, param",
    [
        ({"logprobs": 1}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json"}}, "response_format.type"),
        ({"echo": True}, "echo"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"n": 0}, "n"),
        ({"top_k": 1 << 63, "temperature": 1}, "top_k"),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
         "messages[0].content[0].text"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ],
)
def test_bad_chat_parameters_name_the_param(body, param):
    error = error_of(parse_chat, **body)
    assert error.status_code == 400 and error.param == param, error.message


def test_harmless_defaults_of_unsupported_chat_features_pass():
    request = parse_chat(tools=[], tool_choice="none", response_format={"type": "text"})
    assert request.generate_request.input_ids


@pytest.mark.parametrize("field, value", [
    ("modalities", ["text", "audio"]),
    ("modalities", "text"),
    ("audio", {"voice": "alloy", "format": "wav"}),
    ("web_search_options", {}),
    ("prediction", {"type": "content", "content": "old text"}),
])
def test_what_cannot_be_honoured_is_refused_naming_the_field(field, value):
    error = error_of(parse_chat, **{field: value})
    assert error.status_code == 400 and error.param == field and error.message.startswith(field), error.message


def test_bookkeeping_fields_are_taken():
    request = parse_chat(store=False, metadata={"team": "a"}, service_tier="auto", user="someone", modalities=["text"],
                         audio=None, prediction=None, web_search_options=None)
    assert request.generate_request.input_ids


def test_chat_prompt_that_fills_the_context_is_a_clear_400():
    messages = [{"role": "user", "content": "x"}] * 10  # 100 tokens: no room left
    error = error_of(parse_chat, messages=messages)
    assert error.param == "messages" and "100 tokens" in error.message
