"""``/v1/embeddings`` on real servers (real processes, sockets and HTTP): all-MiniLM-L6-v2 from its
folder, and decoders with ``[model] pooling``, against plain transformers and through the openai SDK."""

from __future__ import annotations

import base64
import struct
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy
import openai
import pytest
import torch
import torch.nn.functional as F
from test_metrics_serving import scrape, value

from tercet.testing import TINY_SETTINGS

TEXTS = [
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Embeddings map sentences with similar meanings to nearby vectors; " * 12,
    "Café, naïve, 東京, emoji 🙂 and punctuation: (!?)",
    "tercet batches several embedding requests in one scheduler step.",
]
TIMEOUT = 120


def cosines(ours, reference) -> list[float]:
    return F.cosine_similarity(torch.tensor(numpy.asarray(ours)), reference).tolist()


@pytest.fixture(scope="module")
def minilm_server(start_server, minilm_dir):
    return start_server(minilm_dir, TINY_SETTINGS)


@pytest.fixture(scope="module")
def minilm_client(minilm_server):
    return openai.OpenAI(base_url=minilm_server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def minilm_reference(minilm_dir):
    """sentence-transformers' recipe in plain transformers: AutoModel, mean over the mask, L2."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    model = AutoModel.from_pretrained(minilm_dir, dtype=torch.float32).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1), tokenizer


def test_the_sdk_gets_minilm_embeddings_equal_to_transformers_mean_pooling(minilm_client, minilm_reference):
    reference, tokenizer = minilm_reference
    # The SDK asks for base64 and decodes it itself.
    reply = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)
    assert [item.index for item in reply.data] == list(range(len(TEXTS)))
    found = cosines([item.embedding for item in reply.data], reference)
    print(f"MiniLM through the SDK: cosine to transformers min {min(found):.9f} (1 - min = {1 - min(found):.1e})")
    assert min(found) >= 0.9999, found
    assert reply.model == "all-MiniLM-L6-v2"
    num_tokens = sum(len(tokenizer(text)["input_ids"]) for text in TEXTS)
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (num_tokens, num_tokens)
    as_floats = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS, encoding_format="float")
    # Equal up to float rounding: the inputs may be batched differently the second time.
    assert numpy.allclose([item.embedding for item in as_floats.data], [item.embedding for item in reply.data],
                          atol=1e-6)


def test_raw_http_float_and_base64_agree_and_a_single_string_is_one_vector(minilm_server, minilm_reference):
    reference, _ = minilm_reference
    url = minilm_server.base_url + "/v1/embeddings"
    as_floats = httpx.post(url, json={"input": TEXTS[1]}, timeout=TIMEOUT).json()
    as_base64 = httpx.post(url, json={"input": TEXTS[1], "encoding_format": "base64"}, timeout=TIMEOUT).json()
    (item,) = as_floats["data"]
    assert item["object"] == "embedding" and len(item["embedding"]) == 384
    decoded = struct.unpack("<384f", base64.b64decode(as_base64["data"][0]["embedding"]))
    assert list(decoded) == item["embedding"]
    assert cosines([item["embedding"]], reference[1:2])[0] >= 0.9999


def test_token_id_inputs_embed_as_the_text_they_tokenize_from(minilm_client, minilm_reference):
    _, tokenizer = minilm_reference
    ids = [tokenizer(text)["input_ids"] for text in TEXTS[:3]]
    from_text = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[:3])
    from_ids = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=ids)
    from_one_list = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=ids[1])
    for text_item, id_item in zip(from_text.data, from_ids.data):
        assert numpy.allclose(text_item.embedding, id_item.embedding, atol=1e-6)
    assert numpy.allclose(from_one_list.data[0].embedding, from_text.data[1].embedding, atol=1e-6)


def test_embedded_inputs_and_their_tokens_are_counted_in_the_metrics(minilm_server):
    before = scrape(minilm_server)
    reply = httpx.post(minilm_server.base_url + "/v1/embeddings", json={"input": TEXTS[:3]}, timeout=TIMEOUT).json()
    after = scrape(minilm_server)
    assert (value(after, "tercet:embedding_inputs_total", outcome="embedded")
            - value(before, "tercet:embedding_inputs_total", outcome="embedded")) == 3
    assert (value(after, "tercet:prompt_tokens_total") - value(before, "tercet:prompt_tokens_total")
            == reply["usage"]["prompt_tokens"])
    # Embeddings are not completions: the generation series do not move.
    assert value(after, "tercet:request_success_total") == value(before, "tercet:request_success_total")


def test_concurrent_requests_get_what_each_gets_alone(minilm_client):
    alone = [minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=text).data[0].embedding for text in TEXTS]
    with ThreadPoolExecutor(len(TEXTS)) as pool:
        together = list(pool.map(
            lambda text: minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input=text).data[0].embedding, TEXTS
        ))
    for one, other in zip(alone, together):
        assert numpy.allclose(one, other, atol=1e-5)


def test_dimensions_is_taken_at_the_models_size_only(minilm_client):
    full = minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input="a", dimensions=384)
    assert len(full.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as refused:
        minilm_client.embeddings.create(model="all-MiniLM-L6-v2", input="a", dimensions=128)
    assert refused.value.body["param"] == "dimensions"
    assert "Matryoshka" in refused.value.body["message"]


@pytest.mark.parametrize("body, param", [
    ({"input": "word " * 600}, "input"),
    ({"input": ["fine", "word " * 600]}, "input[1]"),
    ({"input": [101] * 513}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[101, 102], []]}, "input[1]"),
    ({"input": "a", "encoding_format": "binary"}, "encoding_format"),
])
def test_inputs_the_model_cannot_take_whole_are_a_400_naming_them(minilm_server, body, param):
    response = httpx.post(minilm_server.base_url + "/v1/embeddings", json=body, timeout=TIMEOUT)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_generation_on_the_encoder_is_a_clear_400_and_the_rest_of_the_server_works(minilm_server, minilm_client):
    for create in (
        lambda: minilm_client.completions.create(model="all-MiniLM-L6-v2", prompt="Hello"),
        lambda: minilm_client.chat.completions.create(
            model="all-MiniLM-L6-v2", messages=[{"role": "user", "content": "Hello"}]),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            create()
        assert "encoder-only" in refused.value.body["message"] and refused.value.body["param"] == "model"
    base = minilm_server.base_url
    native = httpx.post(base + "/generate", json={"text": "Hello"}, timeout=TIMEOUT)
    assert native.status_code == 400 and "/v1/embeddings" in native.json()["error"]["message"]
    assert [model.id for model in minilm_client.models.list().data] == ["all-MiniLM-L6-v2"]
    assert httpx.get(base + "/health_generate", timeout=TIMEOUT).json() == {"status": "ok"}
    info = httpx.get(base + "/get_server_info", timeout=TIMEOUT).json()
    assert info["context_len"] == 512
    assert info["ranks"][0]["weights"]["pooling"] == {"method": "mean", "normalize": True, "source": "modules.json"}
    assert "tercet:num_requests_running" in httpx.get(base + "/metrics", timeout=TIMEOUT).text
    assert httpx.get(base + "/", timeout=TIMEOUT).status_code == 200


# -- decoders with [model] pooling ------------------------------------------------


def decoder_reference(model_dir, texts, method):
    """Plain transformers: the decoder's final hidden states (after its final norm), pooled, L2-normalised."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    vectors = []
    with torch.inference_mode():
        for text in texts:
            hidden = model(torch.tensor([tokenizer(text)["input_ids"]])).last_hidden_state[0]
            vectors.append(hidden.mean(0) if method == "mean" else hidden[-1])
    return F.normalize(torch.stack(vectors), dim=1)


@pytest.mark.parametrize("method", ["mean", "last"])
def test_a_decoder_with_pooling_serves_embeddings_and_still_generates(start_server, tiny_llama_dir, method):
    # One through the TOML file, one through --set: both are how users set it.
    if method == "mean":
        server = start_server(tiny_llama_dir, TINY_SETTINGS, config='[model]\npooling = "mean"\n')
    else:
        server = start_server(tiny_llama_dir, [*TINY_SETTINGS, "model.pooling=last"])
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    texts = TEXTS[:4]
    reply = client.embeddings.create(model=tiny_llama_dir.name, input=texts)
    found = cosines([item.embedding for item in reply.data], decoder_reference(tiny_llama_dir, texts, method))
    print(f"tiny Llama, {method} pooling: cosine to transformers min {min(found):.9f} (1 - min = {1 - min(found):.1e})")
    assert min(found) >= 0.9999, found
    completion = client.completions.create(model=tiny_llama_dir.name, prompt="Hello", max_tokens=3, temperature=0)
    assert completion.choices[0].finish_reason == "length"
    server.stop()


def test_a_decoder_without_pooling_refuses_embeddings_saying_to_set_it(tiny_server, tiny_llama_dir):
    client = openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=tiny_llama_dir.name, input="Hello")
    assert "[model] pooling" in refused.value.body["message"]
    assert refused.value.body["param"] == "model"
