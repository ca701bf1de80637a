"""The official openai client against a real server (tiny model)."""

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


def test_models_lists_the_served_model(client, tiny_llama_dir):
    assert [model.id for model in client.models.list().data] == [tiny_llama_dir.name]


def test_models_retrieve_gives_the_listed_model(client, model_name):
    retrieved = client.models.retrieve(model_name)
    assert retrieved == client.models.list().data[0]
    assert (retrieved.id, retrieved.object, retrieved.owned_by) == (model_name, "model", "tercet")


@pytest.mark.parametrize("other", ["no-such-model", "org/no-such-model"])
def test_models_retrieve_of_another_model_is_not_found(client, model_name, other):
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve(other)
    assert refused.value.status_code == 404
    assert refused.value.body == {
        "message": f"The model `{other}` does not exist; this server serves `{model_name}`.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


# "☕" is three byte-level tokens (" \xe2", "\x98", "\x95"), each with the text "�".
SPLIT_PROMPT = "Café ☕ naïve 🙂 done"


def test_echoed_text_offsets_count_a_split_character_once(client, model_name):
    reply = client.completions.create(
        model=model_name, prompt=SPLIT_PROMPT, echo=True, logprobs=0, max_tokens=0, temperature=0
    )
    choice = reply.choices[0]
    assert choice.text == SPLIT_PROMPT
    assert choice.logprobs.tokens[3:6] == [" \ufffd", "\ufffd", "\ufffd"]
    offsets = choice.logprobs.text_offset
    assert offsets == [0, 1, 3, 4, 5, 5, 6, 9, 12, 14]
    ends = [*offsets[1:], len(choice.text)]
    assert "".join(choice.text[start:end] for start, end in zip(offsets, ends)) == choice.text


def test_streamed_text_offsets_equal_the_whole_answers(client, model_name):
    request = {"model": model_name, "prompt": SPLIT_PROMPT, "echo": True, "logprobs": 0, "max_tokens": 6, "temperature": 0}
    whole = client.completions.create(**request).choices[0]
    chunks = [chunk.choices[0] for chunk in client.completions.create(**request, stream=True) if chunk.choices]
    streamed = [offset for chunk in chunks if chunk.logprobs for offset in chunk.logprobs.text_offset]
    assert "".join(chunk.text for chunk in chunks) == whole.text
    assert streamed == whole.logprobs.text_offset
    assert whole.logprobs.text_offset[:10] == [0, 1, 3, 4, 5, 5, 6, 9, 12, 14]


def test_streamed_completion_equals_the_whole_one(client, model_name):
    whole = client.completions.create(model=model_name, prompt="Hello there", max_tokens=12, temperature=0)
    chunks = list(
        client.completions.create(
            model=model_name, prompt="Hello there", max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].text
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    assert chunks[-1].usage.completion_tokens == 12
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "length"


def test_streamed_chat_completion(client, model_name):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    whole = client.chat.completions.create(model=model_name, messages=messages, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(model=model_name, messages=messages, max_tokens=10, temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.prompt_tokens > 5 and whole.usage.completion_tokens <= 10


def test_seeded_sampling_is_reproducible(client, model_name):
    def sample():
        return client.completions.create(model=model_name, prompt="Tell me", max_tokens=16, temperature=0.9, top_p=0.9, seed=1234)

    assert sample().choices[0].text == sample().choices[0].text


def test_bad_request_is_an_openai_error_and_the_server_keeps_serving(client, model_name, tiny_server):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_name, prompt="x", max_tokens=10, temperature=-1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    too_long = httpx.post(tiny_server.base_url + "/generate",
                          json={"input_ids": [1] * 2000, "sampling_params": {"max_new_tokens": 4}}, timeout=30)
    assert too_long.status_code == 400
    assert "context length" in too_long.json()["error"]["message"]
    assert client.completions.create(model=model_name, prompt="x", max_tokens=2).usage.completion_tokens == 2


def test_health(tiny_server):
    assert httpx.get(tiny_server.base_url + "/health").status_code == 200
