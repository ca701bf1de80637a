"""Embedding requests in a real scheduler (in-process, real sockets): batched per step, pooled
there, beside running generations, and refused with a reason naming the field."""

from __future__ import annotations

import numpy
import pytest

from tercet.ipc.control_messages import AbortAllReq, GetInternalStateReq
from tercet.ipc.messages import AbortReq, TokenizedGenerateReq
from tercet.sampling_params import SamplingParams

MEAN = ["model.pooling=mean"]
INPUTS = {"a": [1, 2, 3, 4, 5], "b": [9, 8], "c": [40, 41, 42, 43, 44, 45, 46]}


def greedy(max_new_tokens):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=1, ignore_eos=True)


def embed_alone(make_harness, input_ids, settings=MEAN):
    harness = make_harness(settings)
    harness.embed("alone", input_ids)
    vector, refusal = harness.run_embeddings()["alone"]
    assert refusal is None
    return vector


def test_inputs_sent_together_share_one_forward_and_equal_their_vectors_alone(make_harness):
    harness = make_harness(MEAN)
    for rid, input_ids in INPUTS.items():
        harness.embed(rid, input_ids)
    results = harness.run_embeddings()
    assert harness.embed_calls == [list(INPUTS.values())]
    assert harness.forward_calls == []  # no generating forward ran
    for rid, input_ids in INPUTS.items():
        vector, refusal = results[rid]
        assert refusal is None and vector.shape == (64,) and numpy.isclose(numpy.linalg.norm(vector), 1.0)
        assert numpy.allclose(vector, embed_alone(make_harness, input_ids), atol=1e-5)


def test_a_step_takes_no_more_than_the_token_budget_of_padded_batch(make_harness):
    # 3 inputs, the longest 7 tokens: 3 x 7 = 21 > 16, so the third waits a step.
    harness = make_harness([*MEAN, "scheduler.chunked_prefill_size=16"])
    for rid, input_ids in INPUTS.items():
        harness.embed(rid, input_ids)
    results = harness.run_embeddings()
    assert harness.embed_calls == [[INPUTS["a"], INPUTS["b"]], [INPUTS["c"]]]
    assert set(results) == set(INPUTS)


def test_embeddings_run_beside_generation_and_give_back_every_page(make_harness, harness):
    harness.submit("gen", [5, 6, 7], greedy(6))
    alone = harness.run_until_finished()
    mixed = make_harness(MEAN)
    allocator = mixed.scheduler.model_runner.page_allocator
    baseline = allocator.num_free
    mixed.submit("gen", [5, 6, 7], greedy(6))
    tokens = {}
    embeddings = {}
    for step in range(100):
        if step == 1:  # the generation is decoding: the input joins beside it
            mixed.embed("e", INPUTS["a"])
        elif step > 1 and mixed.is_idle():
            break
        for output in mixed.step():
            if hasattr(output, "embeddings"):
                embeddings.update(zip(output.rids, output.embeddings))
            else:
                for rid, new_ids in zip(output.rids, output.new_token_ids):
                    tokens.setdefault(rid, []).extend(new_ids)
    assert tokens == alone
    vector = numpy.frombuffer(embeddings["e"], dtype="<f4")
    assert numpy.allclose(vector, embed_alone(make_harness, INPUTS["a"]), atol=1e-5)
    # What the embedding borrowed went back; the prefix cache may keep the generation's pages.
    cache = mixed.scheduler.prefix_cache
    assert allocator.num_free + (cache.num_cached_pages if cache else 0) == baseline
    assert mixed.scheduler.model_runner.req_to_token_pool.num_free == 4


def test_an_input_waits_while_running_generations_hold_every_row(make_harness):
    harness = make_harness(MEAN, max_running_requests=1)
    harness.submit("gen", [5, 6, 7], greedy(3))
    harness.step()
    harness.embed("e", [1, 2, 3])
    outputs = harness.step()
    assert not any(hasattr(output, "embeddings") for output in outputs)
    assert harness.run_embeddings()["e"][1] is None


@pytest.mark.parametrize("input_ids, param, message", [
    ([], "input", "the input is empty"),
    ([1, 10**6], "input", "input token ids must be in"),
    (list(range(1, 300)), "input", "the input has 299 tokens, more than the model's 256"),
])
def test_an_input_the_model_cannot_take_is_refused_naming_input(make_harness, input_ids, param, message):
    harness = make_harness(MEAN)
    harness.embed("bad", input_ids)
    vector, refusal = harness.run_embeddings()["bad"]
    assert vector is None
    assert (refusal.kind, refusal.status_code, refusal.param) == ("abort", 400, param)
    assert message in refusal.message
    assert harness.embed_calls == []


def test_a_decoder_without_pooling_refuses_saying_to_set_it(harness):
    harness.embed("e", [1, 2, 3])
    _, refusal = harness.run_embeddings()["e"]
    assert (refusal.status_code, refusal.param) == (400, "model")
    assert "[model] pooling" in refusal.message


def test_waiting_inputs_can_be_aborted_one_or_all(make_harness):
    harness = make_harness(MEAN)
    harness.scheduler.queues.pause()  # nothing runs: the inputs stay waiting
    for rid in ("one", "two", "three"):
        harness.embed(rid, [1, 2])
    harness.send(AbortReq("one"))
    harness.deliver()
    assert [req.rid for req in harness.scheduler.queues.waiting_embeddings] == ["two", "three"]
    assert harness.control(AbortAllReq("abort-all")).data == {"num_aborted": 2}
    harness.scheduler.queues.resume()
    results = harness.run_embeddings()
    assert {rid: refusal.kind for rid, (_, refusal) in results.items()} == {"one": "abort", "two": "abort", "three": "abort"}
    assert harness.embed_calls == []


def test_an_encoder_scheduler_embeds_and_refuses_generation(make_harness, minilm_dir):
    harness = make_harness(model_dir=minilm_dir)
    harness.send(TokenizedGenerateReq("gen", [101, 7592, 102], greedy(2)))
    harness.embed("e", [101, 7592, 102])
    refusals = {}
    embeddings = {}
    while not harness.is_idle() or not refusals:
        for output in harness.step():
            if hasattr(output, "embeddings"):
                embeddings.update(zip(output.rids, output.refusals))
            else:
                refusals.update(zip(output.rids, output.finished_reasons))
    assert embeddings == {"e": None}
    assert refusals["gen"].status_code == 400
    assert "encoder-only" in refusals["gen"].message
    state = harness.control(GetInternalStateReq("state")).data
    assert (state["kv_total_tokens"], state["weights"]["pooling"]["method"]) == (0, "mean")
