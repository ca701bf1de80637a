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
