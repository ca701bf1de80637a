"""A list of prompts in one request, against a real server (tiny model): each prompt's
choices equal what it gets alone, in OpenAI's order (``index = prompt × n + i``).

The log-probability checks are lm-eval's ``--batch_size 8`` against ``--batch_size 1``:
its local-completions model sends a list of token-id lists with echo, and the scores
must not depend on how many prompts share a request.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from transformers import AutoTokenizer

PROMPTS = ["The capital of France is", "def add(a, b):", "Once upon a time, in a kingdom by the sea,"]
MAX_TOKENS = 8
# Batched prefill sums in another order than one prompt alone: float32 rounding, nothing more.
TOLERANCE = 1e-4
TIMEOUT = 120


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir):
    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def greedy(client, model_name, prompt, **fields):
    return client.completions.create(model=model_name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, **fields)


def test_three_prompts_with_n_2_give_six_choices_each_as_its_prompt_alone(client, model_name):
    batch = greedy(client, model_name, PROMPTS, n=2)
    alone = [greedy(client, model_name, prompt) for prompt in PROMPTS]
    assert [choice.index for choice in batch.choices] == list(range(6))
    assert [choice.text for choice in batch.choices] == [a.choices[0].text for a in alone for _ in range(2)]
    assert {choice.finish_reason for choice in batch.choices} == {"length"}
    # Each prompt counts once however many choices it had, as OpenAI counts.
    assert batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert batch.usage.completion_tokens == 6 * MAX_TOKENS
    assert batch.usage.total_tokens == batch.usage.prompt_tokens + batch.usage.completion_tokens


def test_echo_returns_each_choice_its_own_prompt(client, model_name, tokenizer):
    batch = greedy(client, model_name, PROMPTS, echo=True)
    token_ids = greedy(client, model_name, [tokenizer.encode(p) for p in PROMPTS], echo=True)
    alone = [greedy(client, model_name, prompt) for prompt in PROMPTS]
    for prompt, choice, by_ids, single in zip(PROMPTS, batch.choices, token_ids.choices, alone):
        assert choice.text == prompt + single.choices[0].text
        assert by_ids.text == tokenizer.decode(tokenizer.encode(prompt)) + single.choices[0].text


def assert_same_logprobs(batched, alone) -> None:
    assert batched.text == alone.text
    assert batched.logprobs.tokens == alone.logprobs.tokens
    assert batched.logprobs.text_offset == alone.logprobs.text_offset
    assert batched.logprobs.token_logprobs[0] is None and alone.logprobs.token_logprobs[0] is None
    pairs = list(zip(batched.logprobs.token_logprobs[1:], alone.logprobs.token_logprobs[1:]))
    assert max(abs(b - a) for b, a in pairs) < TOLERANCE
    for batched_top, alone_top in zip(batched.logprobs.top_logprobs[1:], alone.logprobs.top_logprobs[1:]):
        assert batched_top.keys() == alone_top.keys()


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_token_id_prompts_with_echo_score_as_one_request_per_prompt(client, model_name, tokenizer, max_tokens):
    """lm-eval's loglikelihood requests, batched and one by one."""
    prompts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    fields = {"echo": True, "logprobs": 1, "max_tokens": max_tokens, "temperature": 0, "seed": 1234}
    batch = client.completions.create(model=model_name, prompt=prompts, **fields)
    assert [choice.index for choice in batch.choices] == [0, 1, 2]
    for prompt, choice in zip(prompts, batch.choices):
        alone = client.completions.create(model=model_name, prompt=[prompt], **fields).choices[0]
        assert len(choice.logprobs.token_logprobs) == len(prompt) + max_tokens
        assert_same_logprobs(choice, alone)
    assert batch.usage.prompt_tokens == sum(len(prompt) for prompt in prompts)


def test_a_streamed_batch_names_every_chunk_by_its_index(client, model_name):
    whole = greedy(client, model_name, PROMPTS, n=2)
    chunks = list(greedy(client, model_name, PROMPTS, n=2, stream=True, stream_options={"include_usage": True}))
    texts, finishes = {}, []
    for chunk in chunks[:-1]:
        [choice] = chunk.choices
        texts[choice.index] = texts.get(choice.index, "") + choice.text
        if choice.finish_reason:
            finishes.append(choice.index)
    assert texts == {choice.index: choice.text for choice in whole.choices}
    assert sorted(finishes) == list(range(6))
    usage = chunks[-1].usage  # cached_tokens may differ: the second request finds the first's prompts cached
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens, whole.usage.completion_tokens)


def test_a_streamed_echo_with_logprobs_gives_each_prompt_its_own(client, model_name, tokenizer):
    prompts = [tokenizer.encode(prompt) for prompt in PROMPTS]
    fields = {"echo": True, "logprobs": 1, "max_tokens": 2, "temperature": 0}
    whole = client.completions.create(model=model_name, prompt=prompts, **fields)
    chunks = list(client.completions.create(model=model_name, prompt=prompts, stream=True, **fields))
    for choice in whole.choices:
        mine = [chunk.choices[0] for chunk in chunks if chunk.choices[0].index == choice.index]
        assert "".join(c.text for c in mine) == choice.text
        streamed = [lp for c in mine if c.logprobs for lp in c.logprobs.token_logprobs]
        assert len(streamed) == len(choice.logprobs.token_logprobs) and streamed[0] is None
        assert max(abs(s - w) for s, w in zip(streamed[1:], choice.logprobs.token_logprobs[1:])) < TOLERANCE


# -- /generate -----------------------------------------------------------------


def generate(base_url: str, body: dict):
    return httpx.post(base_url + "/generate", json=body, timeout=TIMEOUT)


SAMPLING = {"max_new_tokens": MAX_TOKENS, "temperature": 0}


@pytest.mark.parametrize("field", ["text", "input_ids"])
def test_a_native_batch_answers_a_list_each_as_its_prompt_alone(tiny_server, tokenizer, field):
    prompts = PROMPTS if field == "text" else [tokenizer.encode(p) for p in PROMPTS]
    answer = generate(tiny_server.base_url, {field: prompts, "sampling_params": {**SAMPLING, "n": 2}, "rid": "batch"})
    assert answer.status_code == 200, answer.text
    outputs = answer.json()
    alone = [generate(tiny_server.base_url, {field: prompt, "sampling_params": SAMPLING}).json() for prompt in prompts]
    assert [o["index"] for o in outputs] == list(range(6))
    assert [o["output_ids"] for o in outputs] == [a["output_ids"] for a in alone for _ in range(2)]
    assert [o["meta_info"]["id"] for o in outputs] == [f"batch#{p}#{i}" for p in range(3) for i in range(2)]
    assert [o["meta_info"]["prompt_tokens"] for o in outputs] == [a["meta_info"]["prompt_tokens"] for a in alone
                                                                    for _ in range(2)]


def test_a_native_batch_streams_each_completion_cumulatively(tiny_server):
    whole = generate(tiny_server.base_url, {"text": PROMPTS, "sampling_params": SAMPLING}).json()
    with httpx.stream("POST", tiny_server.base_url + "/generate", timeout=TIMEOUT,
                      json={"text": PROMPTS, "sampling_params": SAMPLING, "stream": True}) as response:
        assert response.status_code == 200
        lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    last = {}
    for event in map(json.loads, lines[:-1]):
        assert event["output_ids"][: len(last.get(event["index"], []))] == last.get(event["index"], [])  # cumulative
        last[event["index"]] = event["output_ids"]
    assert last == {o["index"]: o["output_ids"] for o in whole}


# -- lm-eval itself ------------------------------------------------------------------

TASK = """\
task: tercet_prompt_lists
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
DOCS = [
    {"question": "The capital of France is", "choices": [" Paris", " Berlin", " Rome"], "answer": 0},
    {"question": "Two plus two is", "choices": [" four", " five"], "answer": 0},
    {"question": "The sky is", "choices": [" blue", " green", " loud", " made of cheese"], "answer": 0},
    {"question": "def add(a, b):\n    return", "choices": [" a + b", " a - b"], "answer": 0},
]


def test_lm_eval_scores_do_not_depend_on_its_batch_size(tiny_server, tiny_llama_dir, model_name, tmp_path, monkeypatch):
    import lm_eval  # a test dependency (pyproject's test extra)
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    (tmp_path / "task.yaml").write_text(TASK.format(data=tmp_path / "docs.jsonl"))

    def scores(batch_size: int) -> list:
        model_args = (
            f"model={model_name},base_url={tiny_server.base_url}/v1/completions,tokenizer_backend=huggingface,"
            f"tokenizer={tiny_llama_dir},num_concurrent=1,max_retries=1,batch_size={batch_size}"
        )
        results = lm_eval.simple_evaluate(
            model="local-completions", model_args=model_args, tasks=["tercet_prompt_lists"],
            task_manager=TaskManager(include_path=str(tmp_path)), log_samples=True,
        )
        samples = sorted(results["samples"]["tercet_prompt_lists"], key=lambda sample: sample["doc_id"])
        return [[response[0] for response in sample["resps"]] for sample in samples]

    one_by_one, batched = scores(1), scores(8)
    assert len(one_by_one) == len(DOCS)
    for single_doc, batched_doc in zip(one_by_one, batched):
        assert [is_greedy for _, is_greedy in single_doc] == [is_greedy for _, is_greedy in batched_doc]
        assert max(abs(a - b) for (a, _), (b, _) in zip(single_doc, batched_doc)) < TOLERANCE
