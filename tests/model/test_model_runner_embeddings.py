"""A decoder's embeddings (ModelRunner.embed): its final hidden states, after the final norm,
pooled as [model] pooling says, against plain transformers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tercet.testing.runner_factory import model_runner_for

OPTIONS = dict(max_total_tokens=256, page_size=8, dtype="float32")
SEQUENCES = [[1, 2, 3, 4, 5], [9, 8], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]]


def reference(model_dir, method):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    vectors = []
    with torch.inference_mode():
        for sequence in SEQUENCES:
            hidden = model(torch.tensor([sequence])).last_hidden_state[0]  # after the final norm
            vectors.append(hidden.mean(0) if method == "mean" else hidden[-1])
    return F.normalize(torch.stack(vectors), dim=1)


@pytest.mark.parametrize("method", ["mean", "last"])
def test_pooled_final_hidden_states_match_transformers(tiny_llama_dir, method):
    runner = model_runner_for(tiny_llama_dir, pooling=method, **OPTIONS)
    rows = [runner.req_to_token_pool.alloc() for _ in SEQUENCES]
    for row, sequence in zip(rows, SEQUENCES):
        pages = runner.page_allocator.alloc(-(-len(sequence) // runner.page_size))
        runner.req_to_token_pool.assign_pages(row, 0, pages, runner.page_size)
    ours = runner.embed(SEQUENCES, rows)
    cosines = F.cosine_similarity(ours, reference(tiny_llama_dir, method))
    assert cosines.min() >= 0.9999, cosines


def test_a_decoder_pools_only_when_configured(tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, **OPTIONS)
    assert runner.pooling is None and runner.weights_info["pooling"] is None
    assert runner.can_generate and runner.embedding_size == runner.config.hidden_size
