from __future__ import annotations

import dataclasses

import pytest
from http_stand_in import (
    MODEL,
    PROMPT_LOGPROBS,
    STREAMED,
    WHOLE,
    StandInTokenizerManager,
    client_for,
    piece,
    post,
    sse_events,
    with_logprobs,
)

from tercet.http.server.app import create_app
from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio


N_WHOLE = [  # n=2 without streaming: one whole piece per index, in any order
    piece(" it!", [3, 8], FinishReason("stop", matched_token=2), 2, index=1),
    piece("Hello", [5, 6, 7], FinishReason("length"), 3, index=0),
]
N_STREAMED = [
    piece("Hel", [5], None, 1, index=0),
    piece(" it", [3], None, 1, index=1),
    piece("lo", [6, 7], FinishReason("length"), 3, index=0),
    piece("!", [8], FinishReason("stop", matched_token=2), 2, index=1),
]


async def test_completion_n_choices_and_usage_counts_the_prompt_once():
    manager = StandInTokenizerManager(script=N_WHOLE)
    body = (await post({"prompt": "Say", "n": 2, "temperature": 0.8}, manager=manager)).json()
    assert manager.requests[0].sampling_params.n == 2
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [(0, "Hello", "length"), (1, " it!", "stop")]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 0}}


async def test_completion_n_stream_has_chunks_per_index_then_one_usage():
    body = {"prompt": "Say", "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    chunks = sse_events(await post(body, manager=StandInTokenizerManager(script=N_STREAMED)))
    choices = [(c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]]
    assert choices == [(0, "Hel", None), (1, " it", None), (0, "lo", None), (0, "", "length"), (1, "!", None), (1, "", "stop")]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 0}}


async def test_chat_n_stream_starts_every_choice_with_the_role():
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": True}
    chunks = sse_events(await post(body, "/v1/chat/completions", StandInTokenizerManager(script=N_STREAMED)))
    assert [(c["choices"][0]["index"], c["choices"][0]["delta"]) for c in chunks[:2]] == [
        (0, {"role": "assistant", "content": ""}),
        (1, {"role": "assistant", "content": ""}),
    ]
    finished = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]}
    assert finished == {0: "length", 1: "stop"}


async def test_completion_logprobs():
    manager = StandInTokenizerManager(script=[with_logprobs(WHOLE[0])])
    body = (await post({"prompt": "Say", "logprobs": 1}, manager=manager)).json()
    params = manager.requests[0].sampling_params
    assert params.return_logprob and params.top_logprobs_num == 1 and not params.return_prompt_logprob
    assert body["choices"][0]["logprobs"] == {
        "tokens": ["Hel", "l", "o"],
        "token_logprobs": [-0.5, -0.5, -0.5],
        "top_logprobs": [{"Hel": -0.5}, {"l": -0.5}, {"o": -0.5}],
        "text_offset": [0, 3, 4],
    }


async def test_echo_with_logprobs_and_no_new_tokens_is_lm_evals_loglikelihood():
    scored = piece("", [], FinishReason("length"), 0, prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3])
    manager = StandInTokenizerManager(script=[scored])
    request = {"prompt": [[1, 3]], "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    body = (await post(request, manager=manager)).json()
    params = manager.requests[0].sampling_params
    assert params.return_prompt_logprob and params.max_new_tokens == 0
    [choice] = body["choices"]
    assert choice["text"] == "Say it"  # the token-id prompt, decoded
    assert choice["logprobs"] == {
        "tokens": ["Say", " it"],
        "token_logprobs": [None, -0.75],
        "top_logprobs": [None, {" it": -0.75}],
        "text_offset": [0, 3],
    }


async def test_echo_prepends_the_prompt_and_its_logprobs():
    whole = dataclasses.replace(with_logprobs(WHOLE[0]), prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3])
    body = (await post({"prompt": "Say it", "echo": True, "logprobs": 0}, manager=StandInTokenizerManager(script=[whole]))).json()
    logprobs = body["choices"][0]["logprobs"]
    assert body["choices"][0]["text"] == "Say itHello"
    assert logprobs["tokens"] == ["Say", " it", "Hel", "l", "o"]
    assert logprobs["token_logprobs"] == [None, -0.75, -0.5, -0.5, -0.5]
    assert logprobs["text_offset"] == [0, 3, 6, 9, 10]


async def test_echo_without_logprobs_only_prepends_the_text():
    manager = StandInTokenizerManager()
    body = (await post({"prompt": "Say", "echo": True}, manager=manager)).json()
    assert body["choices"][0]["text"] == "SayHello" and body["choices"][0]["logprobs"] is None
    assert not manager.requests[0].sampling_params.return_prompt_logprob


async def test_streamed_echo_waits_for_the_prompt_logprobs_of_index_0():
    script = [
        with_logprobs(piece(" it", [3], None, 1, index=1)),
        with_logprobs(piece("Hel", [5], FinishReason("length"), 1, index=0, prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3])),
        with_logprobs(piece("!", [8], FinishReason("stop"), 2, index=1)),
    ]
    body = {"prompt": "Say it", "echo": True, "logprobs": 0, "n": 2, "stream": True}
    chunks = sse_events(await post(body, manager=StandInTokenizerManager(script=script)))
    choices = [c["choices"][0] for c in chunks]
    by_index = {i: [c for c in choices if c["index"] == i] for i in (0, 1)}
    for index, texts in ((0, ["Say it", "Hel", ""]), (1, ["Say it", " it", "!", ""])):
        assert [c["text"] for c in by_index[index]] == texts
        echoed = by_index[index][0]["logprobs"]
        assert echoed["token_logprobs"] == [None, -0.75] and echoed["text_offset"] == [0, 3]
        assert by_index[index][1]["logprobs"]["text_offset"] == [6]  # continues after the echoed prompt


async def test_missing_logprobs_from_the_server_are_an_error_not_a_silent_gap():
    response = await post({"prompt": "Say", "logprobs": 1})  # the stand-in's pieces have no logprobs
    assert response.status_code == 500
    response = await post({"prompt": "Say", "echo": True, "logprobs": 1}, manager=StandInTokenizerManager(script=[with_logprobs(WHOLE[0])]))
    assert response.status_code == 500


async def test_chat_logprobs():
    manager = StandInTokenizerManager(script=[with_logprobs(WHOLE[0])])
    request = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 2}
    body = (await post(request, "/v1/chat/completions", manager)).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in content] == ["Hel", "l", "o"]
    assert content[0] == {
        "token": "Hel",
        "logprob": -0.5,
        "bytes": list(b"Hel"),
        "top_logprobs": [
            {"token": "Hel", "logprob": -0.5, "bytes": list(b"Hel")},
            {"token": "!", "logprob": -2.0, "bytes": list(b"!")},
        ],
    }


async def test_chat_stream_logprobs_follow_the_deltas():
    script = [with_logprobs(STREAMED[0]), with_logprobs(STREAMED[1])]
    request = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "stream": True}
    chunks = sse_events(await post(request, "/v1/chat/completions", StandInTokenizerManager(script=script)))
    logprobs = [c["choices"][0]["logprobs"] for c in chunks]
    assert logprobs[0] is None and logprobs[-1] is None  # the role chunk, the finish chunk
    assert [[e["token"] for e in lp["content"]] for lp in logprobs[1:-1]] == [["Hel", "l"], ["o"]]


async def test_completion_stream_logprobs_offsets_continue():
    script = [with_logprobs(STREAMED[0]), with_logprobs(STREAMED[1])]
    chunks = sse_events(await post({"prompt": "Say", "logprobs": 0, "stream": True}, manager=StandInTokenizerManager(script=script)))
    assert [c["choices"][0]["logprobs"]["text_offset"] for c in chunks[:2]] == [[0, 3], [4]]


async def test_logit_bias_with_string_keys_reaches_the_sampler_as_ints():
    manager = StandInTokenizerManager()
    await post({"prompt": "Say", "logit_bias": {"5": 100, "7": -100}}, manager=manager)
    assert manager.requests[0].sampling_params.logit_bias == {5: 100, 7: -100}


async def test_logit_bias_outside_the_vocabulary_is_400():
    response = await post({"prompt": "Say", "logit_bias": {"100": 1}})  # the stand-in's vocabulary is 100 tokens
    assert response.status_code == 400 and response.json()["error"]["param"] == "logit_bias"


async def test_the_official_openai_client_reads_logprobs_and_n():
    openai = pytest.importorskip("openai")
    whole = dataclasses.replace(with_logprobs(WHOLE[0]), prompt_logprobs=PROMPT_LOGPROBS, prompt_token_ids=[1, 3])
    manager = StandInTokenizerManager(script=[whole])
    client = openai.AsyncOpenAI(api_key="unused", base_url="http://localhost/v1", http_client=client_for(create_app(manager)))
    completion = await client.completions.create(model=MODEL, prompt="Say it", echo=True, logprobs=1, max_tokens=3)
    assert completion.choices[0].logprobs.token_logprobs[:2] == [None, -0.75]
    assert completion.choices[0].logprobs.top_logprobs[0] is None
    manager.script = [with_logprobs(WHOLE[0])]
    messages = [{"role": "user", "content": "hi"}]
    chat = await client.chat.completions.create(model=MODEL, messages=messages, logprobs=True, top_logprobs=1)
    assert chat.choices[0].logprobs.content[0].top_logprobs[0].token == "Hel"
    manager.script = N_WHOLE
    chat = await client.chat.completions.create(model=MODEL, messages=messages, n=2)
    assert [choice.index for choice in chat.choices] == [0, 1] and chat.usage.completion_tokens == 5
