from __future__ import annotations

import dataclasses

import pytest
from http_stand_in import (
    PROMPT_LOGPROBS,
    STREAMED,
    WHOLE,
    StandInTokenizerManager,
    piece,
    post,
    sse_events,
    with_logprobs,
)

from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio


async def test_native_generate():
    manager = StandInTokenizerManager()
    body = {"text": "Say", "sampling_params": {"max_new_tokens": 3, "temperature": 0, "stop_token_ids": [2]}, "rid": "r1"}
    response = await post(body, "/generate", manager)
    assert response.status_code == 200
    assert response.json() == {
        "text": "Hello",
        "output_ids": [5, 6, 7],
        "meta_info": {"id": "r1", "finish_reason": {"type": "length"}, "prompt_tokens": 3, "cached_tokens": 0, "completion_tokens": 3},
    }
    params = manager.requests[0].sampling_params
    assert (params.max_new_tokens, params.temperature, params.stop_token_ids) == (3, 0, [2])


async def test_native_generate_stream_is_cumulative():
    events = sse_events(await post({"input_ids": [1, 2], "stream": True}, "/generate"))
    assert [(e["text"], e["output_ids"]) for e in events] == [("Hel", [5, 6]), ("Hello", [5, 6, 7])]
    assert [e["meta_info"]["finish_reason"] for e in events] == [None, {"type": "stop", "matched": 2}]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"text": "x", "sampling_params": {"top_q": 5}}, "sampling_params.top_q"),
        ({"text": "x", "sampling_params": {"max_new_tokens": -1}}, "sampling_params.max_new_tokens"),
        ({"text": "x", "sampling_params": {"min_new_tokens": 9, "max_new_tokens": 3}}, "sampling_params.min_new_tokens"),
        ({"text": "x", "sampling_params": {"ignore_eos": "yes"}}, "sampling_params.ignore_eos"),
        ({"text": "x", "sampling_params": {"top_k": -5}}, "sampling_params.top_k"),
        ({"text": "x", "sampling_params": {"logit_bias": {"a": 1}}}, "sampling_params.logit_bias"),
        ({"text": "x", "sampling_params": {"logit_bias": {"100": 1}}}, "sampling_params.logit_bias"),
        ({"text": "x", "sampling_params": {"stop": 5}}, "sampling_params.stop"),
        ({"text": "x", "sampling_params": {"seed": 1 << 64}}, "sampling_params.seed"),
        ({"text": "x", "sampling_params": {"top_logprobs_num": 21}}, "sampling_params.top_logprobs_num"),
        ({"text": "x", "top_logprobs_num": 21}, "top_logprobs_num"),
        ({"text": "x", "return_logprob": "yes"}, "return_logprob"),
        ({"text": "x", "logprob_start_len": -2}, "logprob_start_len"),
        ({"text": "x", "input_ids": [1]}, "text"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [100]}, "input_ids"),  # the stand-in's vocabulary is 100 tokens
        ({"input_ids": [1 << 64]}, "input_ids"),
        ({"text": "\ud800"}, "text"),
        ({"text": "x", "rid": "\udc00"}, "rid"),
        ({"text": "x", "rid": ""}, "rid"),
        ({"text": "x", "user": "\ud800"}, "user"),
        ({"text": "x", "priority": 1 << 31}, "priority"),
        ({"text": "x", "logprob_start_len": 1 << 63}, "logprob_start_len"),
        ({"text": "x", "sampling_params": {"stop": ["\ud800"]}}, "sampling_params.stop"),
        ({"text": "x", "sampling_params": {"top_k": 1 << 63, "temperature": 1}}, "sampling_params.top_k"),
        ({"text": "x", "sampling_params": {"top_k": 1 << 64}}, "sampling_params.top_k"),
        ({"text": "x", "sampling_params": {"max_new_tokens": 1 << 63}}, "sampling_params.max_new_tokens"),
        ({"text": "x", "sampling_params": {"min_new_tokens": -1}}, "sampling_params.min_new_tokens"),
        ({"text": "x", "return_logprob": True, "logprob_start_len": 0, "sampling_params": {"return_prompt_logprob": [1]}},
         "sampling_params.return_prompt_logprob"),
        ({"text": "x", "return_logprob": True, "sampling_params": {"return_logprob": "yes"}},
         "sampling_params.return_logprob"),
    ],
)
async def test_native_generate_rejects_bad_bodies(body, param):
    response = await post(body, "/generate")
    assert response.status_code == 400 and response.json()["error"]["param"] == param
    if param == "sampling_params.top_q":
        assert "'top_q'" in response.json()["error"]["message"]


async def test_native_generate_takes_every_sampling_param():
    manager = StandInTokenizerManager()
    sampling_params = {
        "max_new_tokens": 5, "min_new_tokens": 1, "temperature": 0.5, "top_p": 0.9, "top_k": 4, "min_p": 0.1,
        "frequency_penalty": 0.1, "presence_penalty": 0.2, "repetition_penalty": 1.1, "seed": 7, "stop": "!",
        "stop_token_ids": [2], "ignore_eos": True, "skip_special_tokens": False, "no_stop_trim": True,
        "logit_bias": {"5": 2.5}, "n": 1,
    }
    assert (await post({"text": "x", "sampling_params": sampling_params}, "/generate", manager)).status_code == 200
    params = manager.requests[0].sampling_params
    assert params.stop == ["!"] and params.logit_bias == {5: 2.5} and params.min_new_tokens == 1
    assert (params.top_k, params.min_p, params.repetition_penalty, params.no_stop_trim) == (4, 0.1, 1.1, True)



async def test_native_generate_logprobs():
    whole = dataclasses.replace(
        with_logprobs(WHOLE[0]), prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3],
        finish_reason=FinishReason("stop", matched_text="!"),
    )
    manager = StandInTokenizerManager(script=[whole])
    body = {"text": "Say it", "return_logprob": True, "top_logprobs_num": 1, "logprob_start_len": 0}
    meta = (await post(body, "/generate", manager)).json()["meta_info"]
    params = manager.requests[0].sampling_params
    assert params.return_logprob and params.return_prompt_logprob and params.top_logprobs_num == 1
    assert meta["finish_reason"] == {"type": "stop", "matched": "!"}
    assert meta["output_token_logprobs"] == [[-0.5, 5], [-0.5, 6], [-0.5, 7]]
    assert meta["output_top_logprobs"] == [[[-0.5, 5]], [[-0.5, 6]], [[-0.5, 7]]]
    assert meta["input_token_logprobs"] == [[None, 1], [-0.75, 3]]
    assert meta["input_top_logprobs"] == [None, [[-0.75, 3]]]


async def test_native_generate_logprob_start_len_and_token_text():
    whole = dataclasses.replace(with_logprobs(WHOLE[0]), prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3])
    body = {"text": "Say it", "return_logprob": True, "logprob_start_len": 1, "return_text_in_logprobs": True}
    meta = (await post(body, "/generate", StandInTokenizerManager(script=[whole]))).json()["meta_info"]
    assert meta["input_token_logprobs"] == [[-0.75, 3, " it"]]
    assert meta["output_token_logprobs"][0] == [-0.5, 5, "Hel"]
    assert meta["output_top_logprobs"][0] == []  # top_logprobs_num defaults to 0


async def test_native_generate_without_logprobs_has_no_logprob_fields():
    manager = StandInTokenizerManager()
    meta = (await post({"text": "x", "logprob_start_len": 0}, "/generate", manager)).json()["meta_info"]
    assert not manager.requests[0].sampling_params.return_prompt_logprob
    assert set(meta) == {"id", "finish_reason", "prompt_tokens", "cached_tokens", "completion_tokens"}


async def test_native_generate_streams_cumulative_logprobs():
    script = [with_logprobs(STREAMED[0]), with_logprobs(STREAMED[1])]
    body = {"text": "x", "stream": True, "return_logprob": True}
    events = sse_events(await post(body, "/generate", StandInTokenizerManager(script=script)))
    assert [len(e["meta_info"]["output_token_logprobs"]) for e in events] == [2, 3]


async def test_native_generate_n_is_a_list_by_index():
    script = [
        piece("b", [6], FinishReason("length"), 1, index=1),
        piece("a", [5], FinishReason("length"), 1, index=0),
    ]
    body = {"text": "x", "sampling_params": {"n": 2}}
    objects = (await post(body, "/generate", StandInTokenizerManager(script=script))).json()
    assert [(o["index"], o["text"], o["output_ids"]) for o in objects] == [(0, "a", [5]), (1, "b", [6])]


async def test_native_generate_n_streams_per_index():
    script = [
        piece("a", [5], None, 1, index=0),
        piece("b", [6], None, 1, index=1),
        piece("c", [7], FinishReason("length"), 2, index=1),
        piece("d", [8], FinishReason("length"), 2, index=0),
    ]
    body = {"text": "x", "stream": True, "sampling_params": {"n": 2}}
    events = sse_events(await post(body, "/generate", StandInTokenizerManager(script=script)))
    assert [(e["index"], e["text"]) for e in events] == [(0, "a"), (1, "b"), (1, "bc"), (0, "ad")]
