"""``POST /v1/embeddings`` on a stand-in TokenizerManager: parsing, the answer's shape, refusals."""

from __future__ import annotations

import base64
import struct

import pytest
from http_stand_in import MODEL, StandInTokenizerManager, post

from tercet.formats.pooling_spec import Pooling
from tercet.model_abilities import ENCODER_CANNOT_GENERATE, NO_POOLING, ModelAbilities

pytestmark = pytest.mark.anyio
VECTOR = [1.0, -2.0, 0.5, 0.0]


async def test_a_list_of_strings_gets_one_float_vector_each_in_order_with_usage():
    manager = StandInTokenizerManager()
    response = await post({"input": ["a", "b", "c"], "model": MODEL}, "/v1/embeddings", manager)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "object": "list",
        "data": [{"object": "embedding", "index": index, "embedding": VECTOR} for index in range(3)],
        "model": MODEL,
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    }
    (request,) = manager.embedded
    assert (request.inputs, request.is_list) == (["a", "b", "c"], True)


async def test_base64_is_the_little_endian_float32_bytes():
    response = await post({"input": "a", "encoding_format": "base64"}, "/v1/embeddings")
    encoded = response.json()["data"][0]["embedding"]
    assert struct.unpack("<4f", base64.b64decode(encoded)) == tuple(VECTOR)


@pytest.mark.parametrize("body, inputs, is_list", [
    ({"input": "one text"}, ["one text"], False),
    ({"input": [5, 6, 7]}, [[5, 6, 7]], False),
    ({"input": [[5], [6, 7]]}, [[5], [6, 7]], True),
    ({"input": ["only"]}, ["only"], True),
])
async def test_every_input_shape_is_taken(body, inputs, is_list):
    manager = StandInTokenizerManager()
    response = await post(body, "/v1/embeddings", manager)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == len(inputs)
    assert (manager.embedded[0].inputs, manager.embedded[0].is_list) == (inputs, is_list)


@pytest.mark.parametrize("body, param", [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["a", ""]}, "input[1]"),
    ({"input": [[1], []]}, "input[1]"),
    ({"input": [100]}, "input"),
    ({"input": ["a", [1]]}, "input"),
    ({}, "input"),
    ({"input": "a", "encoding_format": "binary"}, "encoding_format"),
    ({"input": "a", "dimensions": 2}, "dimensions"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "user": 1}, "user"),
])
async def test_a_bad_field_is_a_400_naming_it(body, param):
    manager = StandInTokenizerManager()
    response = await post(body, "/v1/embeddings", manager)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert manager.embedded == []


async def test_dimensions_equal_to_the_models_size_is_taken_and_another_says_why_not():
    assert (await post({"input": "a", "dimensions": 4}, "/v1/embeddings")).status_code == 200
    refused = (await post({"input": "a", "dimensions": 2}, "/v1/embeddings")).json()["error"]
    assert "4 dimensions" in refused["message"] and "Matryoshka" in refused["message"]


async def test_a_model_that_cannot_pool_refuses_embeddings_saying_what_to_set():
    manager = StandInTokenizerManager()
    manager.abilities = ModelAbilities(can_generate=True, pooling=None, embedding_size=4)
    response = await post({"input": "a"}, "/v1/embeddings", manager)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": NO_POOLING, "type": "invalid_request_error", "param": "model", "code": None,
    }
    assert "[model] pooling" in NO_POOLING


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "a"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}]}),
    ("/generate", {"text": "a"}),
])
async def test_generation_on_an_encoder_only_model_is_a_400_before_anything_runs(path, body):
    manager = StandInTokenizerManager()
    manager.abilities = ModelAbilities(can_generate=False, pooling=Pooling("mean", True, "modules.json"),
                                       embedding_size=4)
    response = await post(body, path, manager)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == ENCODER_CANNOT_GENERATE
    assert manager.requests == [] and manager.templated == []
    assert (await post({"input": "a"}, "/v1/embeddings", manager)).status_code == 200
