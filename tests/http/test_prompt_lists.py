"""A list of prompts in one request (``/v1/completions`` ``prompt``, ``/generate``
``text`` or ``input_ids``): the choices in OpenAI's order, usage summed per prompt."""

from __future__ import annotations

import dataclasses

import pytest
from http_stand_in import StandInTokenizerManager, piece, post, sse_events, with_logprobs

from tercet.ipc.messages import FinishReason, TokenLogprobs

pytestmark = pytest.mark.anyio
LENGTH = FinishReason("length")


def of_prompt(output, prompt_tokens: int, cached_tokens: int = 0):
    return dataclasses.replace(output, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens)


# Two prompts (3 and 5 tokens), n=2: index = prompt × 2 + i, arriving in any order.
BATCH_WHOLE = [
    of_prompt(piece("p1c1", [7], LENGTH, 1, index=3), 5, 2),
    of_prompt(piece("p0c0", [5], LENGTH, 1, index=0), 3),
    of_prompt(piece("p1c0", [6, 7], LENGTH, 2, index=2), 5, 2),
    of_prompt(piece("p0c1", [8], LENGTH, 1, index=1), 3),
]


async def test_choices_come_in_prompt_then_completion_order_and_usage_counts_each_prompt_once():
    manager = StandInTokenizerManager(script=BATCH_WHOLE)
    response = await post({"prompt": ["Say", "Say it"], "n": 2, "max_tokens": 2}, manager=manager)
    body = response.json()
    assert [(c["index"], c["text"]) for c in body["choices"]] == [(0, "p0c0"), (1, "p0c1"), (2, "p1c0"), (3, "p1c1")]
    assert body["usage"] == {
        "prompt_tokens": 3 + 5, "completion_tokens": 5, "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    [request] = manager.requests  # one request, holding both prompts
    assert request.prompts == ["Say", "Say it"] and request.num_completions == 4


async def test_echo_returns_each_choice_its_own_prompt():
    manager = StandInTokenizerManager(script=BATCH_WHOLE)
    body = (await post({"prompt": ["Say", "Say it"], "n": 2, "echo": True}, manager=manager)).json()
    assert [c["text"] for c in body["choices"]] == ["Sayp0c0", "Sayp0c1", "Say itp1c0", "Say itp1c1"]


def scored(index: int, prompt: list[int], logprob: float):
    """lm-eval's loglikelihood answer for one prompt: its log-probabilities, no new tokens."""
    logprobs = TokenLogprobs(prompt, [None, logprob], [[], [[prompt[1], logprob]]])
    output = piece("", [], LENGTH, 0, index=index, prompt_logprobs=logprobs, prompt_token_ids=prompt)
    return of_prompt(output, len(prompt))


async def test_token_id_prompts_with_echo_and_logprobs_score_each_prompt():
    manager = StandInTokenizerManager(script=[scored(1, [5, 7], -0.5), scored(0, [1, 3], -0.75)])
    body = {"prompt": [[1, 3], [5, 7]], "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    choices = (await post(body, manager=manager)).json()["choices"]
    assert [c["text"] for c in choices] == ["Say it", "Helo"]
    assert [c["logprobs"]["tokens"] for c in choices] == [["Say", " it"], ["Hel", "o"]]
    assert [c["logprobs"]["token_logprobs"] for c in choices] == [[None, -0.75], [None, -0.5]]


async def test_a_stream_names_each_chunk_by_its_index_and_sums_usage():
    script = [
        of_prompt(piece("a", [5], None, 1, index=2), 5),
        of_prompt(piece("b", [6], None, 1, index=0), 3),
        of_prompt(piece("c", [7], LENGTH, 2, index=2), 5),
        of_prompt(piece("d", [8], LENGTH, 2, index=0), 3),
        of_prompt(piece("e", [5], LENGTH, 1, index=1), 3),
        of_prompt(piece("f", [6], LENGTH, 1, index=3), 5),
    ]
    body = {"prompt": ["Say", "Say it"], "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    chunks = sse_events(await post(body, manager=StandInTokenizerManager(script=script)))
    texts = {index: "".join(c["choices"][0]["text"] for c in chunks[:-1] if c["choices"][0]["index"] == index)
             for index in range(4)}
    assert texts == {0: "bd", 1: "e", 2: "ac", 3: "f"}
    finishes = [c["choices"][0]["index"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1, 2, 3]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 8
    assert chunks[-1]["usage"]["completion_tokens"] == 6


async def test_a_streamed_echo_waits_for_its_own_prompts_logprobs_only():
    first = scored(0, [1, 3], -0.75)
    second = scored(1, [5, 7], -0.5)
    # Prompt 1's completion comes first; it need not wait for prompt 0's.
    script = [with_logprobs(second), with_logprobs(first)]
    body = {"prompt": [[1, 3], [5, 7]], "echo": True, "logprobs": 1, "max_tokens": 0, "stream": True}
    chunks = sse_events(await post(body, manager=StandInTokenizerManager(script=script)))
    echoed = [(c["choices"][0]["index"], c["choices"][0]["text"]) for c in chunks if c["choices"][0]["text"]]
    assert echoed == [(1, "Helo"), (0, "Say it")]


async def test_a_failure_mid_batch_closes_the_whole_generation():
    manager = StandInTokenizerManager(script=[piece("x", [5], None, 1, index=0), RuntimeError("lost")])
    response = await post({"prompt": ["Say", "Say it"]}, manager=manager)
    assert response.status_code == 500
    assert manager.outputs[0].aclose_calls >= 1  # the TokenizerManager then aborts every prompt's request


# -- /generate -----------------------------------------------------------------


@pytest.mark.parametrize("field, prompts", [("text", ["Say", "Say it"]), ("input_ids", [[1], [1, 3]])])
async def test_native_batch_answers_a_list_in_index_order(field, prompts):
    manager = StandInTokenizerManager(script=BATCH_WHOLE)
    response = await post({field: prompts, "sampling_params": {"n": 2}}, "/generate", manager)
    answer = response.json()
    assert [(o["index"], o["text"]) for o in answer] == [(0, "p0c0"), (1, "p0c1"), (2, "p1c0"), (3, "p1c1")]
    assert [o["meta_info"]["prompt_tokens"] for o in answer] == [3, 3, 5, 5]
    [request] = manager.requests
    assert request.prompts == prompts and request.prompt_field == field


async def test_a_native_batch_of_one_is_still_a_list():
    manager = StandInTokenizerManager(script=[piece("Hello", [5, 6, 7], LENGTH, 3)])
    answer = (await post({"text": ["Say"]}, "/generate", manager)).json()
    assert isinstance(answer, list) and [(o["index"], o["text"]) for o in answer] == [(0, "Hello")]


async def test_a_native_batch_streams_each_completions_whole_output_so_far():
    script = [
        piece("a", [5], None, 1, index=1), piece("b", [6], LENGTH, 1, index=0), piece("c", [7], LENGTH, 2, index=1),
    ]
    manager = StandInTokenizerManager(script=script)
    events = sse_events(await post({"text": ["x", "y"], "stream": True}, "/generate", manager))
    assert [(e["index"], e["text"]) for e in events] == [(1, "a"), (0, "b"), (1, "ac")]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"text": []}, "text"),
        ({"text": ["a", 1]}, "text"),
        ({"text": ["a", ["b"]]}, "text"),
        ({"text": ["a", "\ud800"]}, "text[1]"),
        ({"input_ids": [[1], []]}, "input_ids[1]"),
        ({"input_ids": [[1], [100]]}, "input_ids[1]"),  # the stand-in's vocabulary is 100 tokens
        ({"input_ids": [[1], 2]}, "input_ids"),
        ({"input_ids": [["a"]]}, "input_ids[0]"),
    ],
)
async def test_bad_native_batches_name_the_field(body, param):
    response = await post(body, "/generate")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
