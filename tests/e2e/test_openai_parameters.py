"""Every sampling and response parameter of the OpenAI routes (and /generate), on a real server.

The tiny random model's distributions are sharply peaked (its output head is
scaled up), so greedy decoding is stable; a high temperature makes sampling
visibly random, which the truncation parameters (top_p, top_k, min_p) must undo.
Each test asserts something that fails when the parameter is ignored.
"""

import httpx
import openai
import pytest
from transformers import AutoTokenizer

PROMPT = "The quick brown fox"
HOT = 5.0  # temperature at which the tiny model's samples differ from greedy


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir):
    return AutoTokenizer.from_pretrained(tiny_llama_dir)


@pytest.fixture(scope="module")
def complete(client, model_name):
    def complete(prompt=PROMPT, **options):
        extra_body = {key: options.pop(key) for key in list(options) if key in EXTENSIONS}
        return client.completions.create(model=model_name, prompt=prompt, extra_body=extra_body or None, **options)

    return complete


@pytest.fixture(scope="module")
def chat(client, model_name):
    def chat(content="Say something", **options):
        extra_body = {key: options.pop(key) for key in list(options) if key in EXTENSIONS}
        messages = [{"role": "user", "content": content}]
        return client.chat.completions.create(model=model_name, messages=messages, extra_body=extra_body or None, **options)

    return chat


# Parameters the openai client has no keyword for: they travel in extra_body.
EXTENSIONS = {"top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "ignore_eos", "skip_special_tokens", "no_stop_trim"}


@pytest.fixture(scope="module")
def greedy(complete):
    """The greedy 24-token continuation of PROMPT."""
    return complete(max_tokens=24, temperature=0, ignore_eos=True).choices[0]


@pytest.fixture(scope="module")
def greedy_ids(tiny_server, greedy):
    """Its token ids, from /generate (the OpenAI routes return text only)."""
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}
    answer = httpx.post(tiny_server.base_url + "/generate", json=body, timeout=60).json()
    assert answer["text"] == greedy.text
    return answer["output_ids"]


def texts_at(complete, seeds, **options) -> list[str]:
    return [complete(max_tokens=12, temperature=HOT, seed=seed, **options).choices[0].text for seed in seeds]


# -- temperature, seed, top_p, top_k, min_p --------------------------------------


def test_temperature_zero_is_greedy_and_high_temperature_is_random(complete, greedy):
    assert complete(max_tokens=24, temperature=0, ignore_eos=True).choices[0].text == greedy.text
    greedy_12 = complete(max_tokens=12, temperature=0, ignore_eos=True).choices[0].text
    hot = texts_at(complete, range(4), ignore_eos=True)
    assert len(set(hot)) > 1 and greedy_12 not in hot


def test_seed_makes_sampling_reproducible(complete, chat):
    same = texts_at(complete, [7, 7])
    assert same[0] == same[1]
    assert len(set(texts_at(complete, [1, 2, 3]))) > 1
    first, second = (chat(max_tokens=8, temperature=HOT, seed=11).choices[0].message.content for _ in range(2))
    assert first == second


@pytest.mark.parametrize("truncation", [{"top_p": 1e-6}, {"top_k": 1}, {"min_p": 1.0}])
def test_truncation_to_the_best_token_is_greedy_at_any_temperature(complete, truncation):
    greedy_text = complete(max_tokens=12, temperature=0, ignore_eos=True).choices[0].text
    assert texts_at(complete, [1, 2, 3], ignore_eos=True, **truncation) == [greedy_text] * 3


# -- penalties -------------------------------------------------------------------


def distinct_ratio(choice) -> float:
    """How many of a choice's tokens (from its logprobs) are different ones."""
    tokens = choice.logprobs.tokens
    return len(set(tokens)) / len(tokens)


@pytest.fixture(scope="module")
def greedy_tokens(complete):
    return complete(max_tokens=24, temperature=0, ignore_eos=True, logprobs=0).choices[0]


@pytest.mark.parametrize(
    "penalty",
    [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"repetition_penalty": 5.0}],
)
def test_penalties_discourage_repeating_tokens(complete, greedy_tokens, penalty):
    # Unpenalised, the tiny model repeats a token within 24; penalised, it repeats less.
    assert distinct_ratio(greedy_tokens) < 1
    penalised = complete(max_tokens=24, temperature=0, ignore_eos=True, logprobs=0, **penalty).choices[0]
    assert distinct_ratio(penalised) > distinct_ratio(greedy_tokens)


@pytest.mark.parametrize("penalty", [{"frequency_penalty": -2.0}, {"presence_penalty": -2.0}])
def test_negative_penalties_encourage_repeating(complete, greedy_tokens, penalty):
    encouraged = complete(max_tokens=24, temperature=0, ignore_eos=True, logprobs=0, **penalty).choices[0]
    assert distinct_ratio(encouraged) < distinct_ratio(greedy_tokens)


# -- length and stopping -----------------------------------------------------------


def test_max_tokens_and_max_completion_tokens(complete, chat):
    reply = complete(max_tokens=5, temperature=0, ignore_eos=True)
    assert reply.usage.completion_tokens == 5 and reply.choices[0].finish_reason == "length"
    reply = chat(max_completion_tokens=3, max_tokens=9, temperature=0, ignore_eos=True)
    assert reply.usage.completion_tokens == 3 and reply.choices[0].finish_reason == "length"


def test_stop_token_ids_and_min_tokens(complete, greedy_ids):
    first = greedy_ids[0]
    stopped = complete(max_tokens=24, temperature=0, stop_token_ids=[first])
    assert stopped.usage.completion_tokens == 1 and stopped.choices[0].finish_reason == "stop"
    held = complete(max_tokens=24, temperature=0, stop_token_ids=[first], min_tokens=5)
    assert held.usage.completion_tokens >= 5


def test_stop_string_is_cut_from_the_text(complete, greedy):
    stop = stop_string_from(greedy.text)
    cut = greedy.text.index(stop)
    reply = complete(max_tokens=24, temperature=0, stop=stop, ignore_eos=True).choices[0]
    assert reply.text == greedy.text[:cut] and reply.finish_reason == "stop"
    listed = complete(max_tokens=24, temperature=0, stop=["never appears", stop], ignore_eos=True).choices[0]
    assert listed.text == greedy.text[:cut]
    kept = complete(max_tokens=24, temperature=0, stop=stop, no_stop_trim=True, ignore_eos=True).choices[0]
    assert kept.text == greedy.text[: cut + len(stop)] and kept.finish_reason == "stop"


def stop_string_from(text: str) -> str:
    """A 3-character piece of ``text`` whose first occurrence starts at least 6 characters in."""
    for start in range(6, len(text) - 3):
        candidate = text[start : start + 3]
        if text.index(candidate) == start and candidate.strip():
            return candidate
    pytest.fail(f"no usable stop string in {text!r}")


def test_eos_ends_generation_unless_ignore_eos(complete, tokenizer):
    eos = str(tokenizer.eos_token_id)
    stopped = complete(max_tokens=6, temperature=0, logit_bias={eos: 100})
    assert stopped.usage.completion_tokens == 1 and stopped.choices[0].finish_reason == "stop"
    ignored = complete(max_tokens=6, temperature=0, logit_bias={eos: 100}, ignore_eos=True)
    assert ignored.usage.completion_tokens == 6 and ignored.choices[0].finish_reason == "length"


def test_skip_special_tokens(complete, tokenizer):
    eos = str(tokenizer.eos_token_id)
    options = dict(max_tokens=3, temperature=0, logit_bias={eos: 100}, ignore_eos=True)
    assert complete(**options).choices[0].text == ""
    assert complete(skip_special_tokens=False, **options).choices[0].text == tokenizer.eos_token * 3


# -- logit_bias ---------------------------------------------------------------------


def test_logit_bias_forces_and_forbids_tokens(complete, tokenizer, greedy, greedy_ids):
    forced = tokenizer.encode(" banana")[0]
    reply = complete(max_tokens=4, temperature=0, logit_bias={str(forced): 100}, ignore_eos=True).choices[0]
    assert reply.text == tokenizer.decode([forced]) * 4
    first = greedy_ids[0]
    reply = complete(max_tokens=1, temperature=0, logit_bias={str(first): -100}).choices[0]
    assert reply.text != tokenizer.decode([first])


def test_logit_bias_in_chat(chat, tokenizer):
    forced = tokenizer.encode(" banana")[0]
    reply = chat(max_tokens=3, temperature=0, logit_bias={str(forced): 100}, ignore_eos=True)
    assert reply.choices[0].message.content == tokenizer.decode([forced]) * 3


# -- n --------------------------------------------------------------------------------


def test_n_gives_distinct_choices_with_indices_and_usage_counts_the_prompt_once(complete):
    single = complete(max_tokens=8, temperature=0)
    reply = complete(max_tokens=8, temperature=HOT, n=3, seed=5, ignore_eos=True)
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    assert len({choice.text for choice in reply.choices}) > 1
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens
    assert reply.usage.completion_tokens == 24


def test_n_streamed_matches_n_whole(complete, chat):
    options = dict(max_tokens=8, temperature=HOT, n=2, seed=9, ignore_eos=True)
    whole = complete(**options)
    chunks = list(complete(stream=True, stream_options={"include_usage": True}, **options))
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {choice.index: choice.text for choice in whole.choices}
    assert finishes == {0: "length", 1: "length"}
    assert chunks[-1].usage.completion_tokens == 16 and chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    chat_reply = chat(max_tokens=4, temperature=HOT, n=2, seed=9, ignore_eos=True)
    assert [choice.index for choice in chat_reply.choices] == [0, 1] and chat_reply.usage.completion_tokens == 8


# -- logprobs and echo ------------------------------------------------------------------


def test_completion_logprobs_of_greedy_tokens_are_the_best(complete):
    choice = complete(max_tokens=8, temperature=0, logprobs=3, ignore_eos=True).choices[0]
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 8
    if "\ufffd" not in "".join(logprobs.tokens):  # a token holding part of a character has no text of its own
        assert "".join(logprobs.tokens) == choice.text
        assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(8)]
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert 3 <= len(top) <= 4 and logprob <= 0
        assert top[token] == logprob == max(top.values())
    # Split characters counted once (tests/http/test_text_offsets.py has the rule).
    offsets = logprobs.text_offset
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] <= len(choice.text)


def test_chat_logprobs(chat):
    choice = chat(max_tokens=6, temperature=0, logprobs=True, top_logprobs=2, ignore_eos=True).choices[0]
    content = choice.logprobs.content
    assert len(content) == 6
    assert b"".join(bytes(entry.bytes) for entry in content).decode() == choice.message.content
    for entry in content:
        assert [alt.logprob for alt in entry.top_logprobs] == sorted((alt.logprob for alt in entry.top_logprobs), reverse=True)
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == entry.logprob
    assert chat(max_tokens=2, temperature=0).choices[0].logprobs is None


def test_chat_stream_logprobs(chat):
    chunks = list(chat(max_tokens=5, temperature=0, logprobs=True, ignore_eos=True, stream=True))
    entries = [entry for chunk in chunks for choice in chunk.choices if choice.logprobs for entry in choice.logprobs.content]
    assert len(entries) == 5


def test_echo_prepends_the_prompt(complete):
    plain = complete(max_tokens=4, temperature=0, ignore_eos=True).choices[0].text
    assert complete(max_tokens=4, temperature=0, echo=True, ignore_eos=True).choices[0].text == PROMPT + plain
    assert complete(max_tokens=0, echo=True).choices[0].text == PROMPT


def test_echo_logprobs_with_no_new_tokens(complete, tokenizer):
    prompt_ids = tokenizer.encode(PROMPT)
    reply = complete(prompt=[prompt_ids], max_tokens=0, echo=True, logprobs=1, temperature=0)
    logprobs = reply.choices[0].logprobs
    assert reply.choices[0].text == PROMPT and reply.usage.completion_tokens == 0
    assert "".join(logprobs.tokens) == PROMPT and len(logprobs.tokens) == len(prompt_ids)
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(lp < 0 for lp in logprobs.token_logprobs[1:])


def test_streamed_echo_with_logprobs_matches_the_whole_answer(complete):
    options = dict(max_tokens=4, temperature=0, echo=True, logprobs=2, ignore_eos=True)
    whole = complete(**options).choices[0]
    chunks = [chunk.choices[0] for chunk in complete(stream=True, **options) if chunk.choices]
    assert "".join(choice.text for choice in chunks) == whole.text
    streamed = [lp for choice in chunks if choice.logprobs for lp in choice.logprobs.token_logprobs]
    assert streamed == whole.logprobs.token_logprobs


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, param",
    [
        ({"logit_bias": {"not-a-token": 1}}, "logit_bias"),
        ({"logit_bias": {"99999999": 1}}, "logit_bias"),
        ({"logprobs": 21}, "logprobs"),
        ({"n": 17}, "n"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -3}, "top_k"),
        ({"min_tokens": 50}, "min_tokens"),
        ({"stop": ["x"] * 17}, "stop"),
        ({"best_of": 3}, "best_of"),
    ],
)
def test_out_of_range_values_are_400_naming_the_param(complete, options, param):
    with pytest.raises(openai.BadRequestError) as info:
        complete(max_tokens=4, **options)
    assert info.value.body["param"] == param


def test_chat_top_logprobs_needs_logprobs(chat):
    with pytest.raises(openai.BadRequestError) as info:
        chat(max_tokens=2, top_logprobs=2)
    assert info.value.body["param"] == "top_logprobs"


# -- /generate ----------------------------------------------------------------------------


def test_native_generate_logprobs_and_matched_stop(tiny_server, tokenizer, greedy):
    stop = stop_string_from(greedy.text)
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 24, "temperature": 0, "stop": stop, "ignore_eos": True},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
    }
    answer = httpx.post(tiny_server.base_url + "/generate", json=body, timeout=60).json()
    meta = answer["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": stop}
    assert [token_id for _, token_id in meta["output_token_logprobs"]] == answer["output_ids"]
    assert all(top[0][0] == logprob for (logprob, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]))
    assert [token_id for _, token_id in meta["input_token_logprobs"]] == tokenizer.encode(PROMPT)
    assert meta["input_token_logprobs"][0][0] is None and meta["input_top_logprobs"][0] is None


def test_native_generate_n(tiny_server):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": HOT, "n": 2, "seed": 3}}
    answer = httpx.post(tiny_server.base_url + "/generate", json=body, timeout=60).json()
    assert [item["index"] for item in answer] == [0, 1] and all(len(item["output_ids"]) <= 6 for item in answer)
