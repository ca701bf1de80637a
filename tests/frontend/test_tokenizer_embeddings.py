"""The TokenizerManager's embeddings, driven through its real message handler (no scheduler listens)."""

from __future__ import annotations

import asyncio

import pytest

from tercet.config import load_config
from tercet.errors import RequestError
from tercet.formats.pooling_spec import Pooling
from tercet.frontend.io_struct import EmbeddingRequest, GenerateRequest
from tercet.frontend.tokenizer_manager import TokenizerManager
from tercet.ipc.messages import BatchEmbeddingOutput, FinishReason
from tercet.ipc.port_args import PortArgs
from tercet.model_abilities import ENCODER_CANNOT_GENERATE, ModelAbilities
from tercet.processes.context import ProcessContext
from tercet.sampling_params import SamplingParams
from tercet.tokenizer.loading import load_tokenizer

ENCODER = ModelAbilities(can_generate=False, pooling=Pooling("mean", True, "modules.json"), embedding_size=384)


@pytest.fixture
def manager(minilm_dir):
    config = load_config(environ={}, overrides={"model": {"path": str(minilm_dir)}})
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    manager = TokenizerManager(context, port_args, load_tokenizer(str(minilm_dir)), "minilm", 512, ENCODER)
    yield manager
    manager.close()
    port_args.remove_runtime_dir()


def answer(rids, refusals=None, vector=b"\x00\x00\x80?"):
    refusals = refusals or [None] * len(rids)
    return BatchEmbeddingOutput(list(rids), [b"" if r else vector for r in refusals], [3] * len(rids), refusals)


async def sent_rids(manager, count: int) -> list[str]:
    """Let the event loop run until ``count`` inputs are registered (tokenized and sent)."""
    deadline = asyncio.get_running_loop().time() + 30
    while len(manager.rid_to_state) < count:
        assert asyncio.get_running_loop().time() < deadline, "the inputs were never sent"
        await asyncio.sleep(0.001)
    return list(manager.rid_to_state)


def test_results_come_in_input_order_whatever_order_they_arrive_in(manager):
    async def scenario():
        embedding = asyncio.ensure_future(manager.embed(EmbeddingRequest(["a", "b", "c"], is_list=True, rid="e")))
        rids = await sent_rids(manager, 3)
        assert rids == ["e#0", "e#1", "e#2"]
        manager.embeddings.handle_batch_embedding_output(answer(["e#2", "e#0"]))
        manager.embeddings.handle_batch_embedding_output(answer(["e#1"]))
        return await embedding

    outputs = asyncio.run(scenario())
    assert [output.index for output in outputs] == [0, 1, 2]
    assert manager.rid_to_state == {}


def test_a_refused_input_of_a_list_refuses_the_request_naming_its_position(manager):
    async def scenario():
        embedding = asyncio.ensure_future(manager.embed(EmbeddingRequest(["a", "b"], is_list=True, rid="e")))
        await sent_rids(manager, 2)
        too_long = FinishReason("abort", message="too long", status_code=400, param="input")
        manager.embeddings.handle_batch_embedding_output(answer(["e#0", "e#1"], [None, too_long]))
        return await embedding

    with pytest.raises(RequestError) as refused:
        asyncio.run(scenario())
    assert (refused.value.param, refused.value.status_code) == ("input[1]", 400)


def test_texts_get_the_models_special_tokens_and_too_long_or_empty_is_refused_before_sending(manager):
    assert manager.embeddings.tokenize_input("Hello, World!", "input") == [101, 7592, 1010, 2088, 999, 102]
    assert manager.embeddings.tokenize_input([7592, 2088], "input") == [7592, 2088]
    with pytest.raises(RequestError, match="input\\[2\\] has 602 tokens, more than this model's maximum input of 512"):
        asyncio.run(manager.embed(EmbeddingRequest(["a", "b", "word " * 600], is_list=True)))
    with pytest.raises(RequestError, match="input is empty"):
        manager.embeddings.tokenize_input("", "input")
    assert manager.rid_to_state == {}


def test_a_caller_that_leaves_frees_its_inputs(manager):
    async def scenario():
        embedding = asyncio.ensure_future(manager.embed(EmbeddingRequest(["a"], rid="gone")))
        await sent_rids(manager, 1)
        embedding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await embedding
        manager.embeddings.handle_batch_embedding_output(answer(["gone"]))  # a late result is dropped

    asyncio.run(scenario())
    assert manager.rid_to_state == {} and manager.rank_of_rid == {}


def test_an_encoder_cannot_generate_and_a_decoder_without_pooling_cannot_embed(manager):
    with pytest.raises(RequestError, match="encoder-only") as refused:
        asyncio.run(anext(manager.generate(GenerateRequest(SamplingParams(), text="hi"))))
    assert refused.value.message == ENCODER_CANNOT_GENERATE
    manager.abilities = ModelAbilities(can_generate=True, pooling=None, embedding_size=384)
    with pytest.raises(RequestError, match=r"\[model\] pooling") as refused:
        asyncio.run(manager.embed(EmbeddingRequest(["a"])))
    assert refused.value.param == "model"
