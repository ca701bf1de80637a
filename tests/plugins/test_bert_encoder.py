"""The BERT encoder against transformers: all-MiniLM-L6-v2 pooled as sentence-transformers pools it,
and a random BERT's hidden states; batching and padding change nothing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tercet.formats.checkpoint import open_checkpoint
from tercet.formats.pooling_spec import resolve_pooling
from tercet.model.pooling import pool_hidden_states
from tercet.plugins.bert_architecture.architecture import BertArchitecture

TEXTS = [
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Embeddings map sentences with similar meanings to nearby vectors; " * 12,
    "Café, naïve, 東京, emoji 🙂 and punctuation: (!?)",
]


def load_encoder(model_dir, dtype=torch.float32):
    checkpoint = open_checkpoint(model_dir)
    architecture = BertArchitecture()
    model = architecture.create(checkpoint.config, dtype, "cpu")
    report = architecture.load_weights(model, checkpoint)
    return model.eval(), report


def encode(model, sequences):
    input_ids = torch.tensor([token for sequence in sequences for token in sequence])
    with torch.inference_mode():
        return model(input_ids, [len(sequence) for sequence in sequences])


def reference_embeddings(model_dir, texts):
    """Plain transformers: AutoModel, mean over the attention mask, L2-normalised (modules.json's recipe)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1), tokenizer


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return load_encoder(minilm_dir)[0]


def test_minilm_embeddings_match_transformers_mean_pooling(minilm, minilm_dir):
    reference, tokenizer = reference_embeddings(minilm_dir, TEXTS)
    sequences = [tokenizer(text)["input_ids"] for text in TEXTS]
    pooling = resolve_pooling(minilm_dir, "auto")
    ours = pool_hidden_states(encode(minilm, sequences), [len(s) for s in sequences], pooling)
    cosines = F.cosine_similarity(ours, reference)
    assert cosines.min() >= 0.9999, cosines
    assert torch.allclose(ours, reference, atol=1e-5)


def test_a_sequence_gets_the_same_hidden_states_alone_and_batched(minilm):
    sequences = [[101, 7592, 102], [101, 1996, 4248, 2829, 4419, 102], [101, 1037, 102]]
    batched = encode(minilm, sequences).split([len(s) for s in sequences])
    for sequence, rows in zip(sequences, batched):
        assert torch.allclose(encode(minilm, [sequence]), rows, atol=1e-5)


def test_minilm_loads_every_tensor_dense(minilm_dir):
    _, report = load_encoder(minilm_dir)
    assert report.layers_by_method == {"dense": 6 * 4}
    assert report.weight_bytes > 80 << 20


def test_a_random_bert_with_a_prefix_and_gelu_tanh_matches_transformers(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, hidden_act="gelu_new")
    # A task model's checkpoint: its tensors under "bert.", and a head tercet leaves out.
    reference = BertForMaskedLM(config).eval()
    reference.save_pretrained(tmp_path)
    sequences = [[1, 5, 9, 2], [1, 7, 2], [3] * 16]
    model, _ = load_encoder(tmp_path)
    ours = encode(model, sequences).split([len(s) for s in sequences])
    with torch.inference_mode():
        for sequence, rows in zip(sequences, ours):
            expected = reference.bert(torch.tensor([sequence])).last_hidden_state[0]
            assert torch.allclose(rows, expected, atol=1e-5)
