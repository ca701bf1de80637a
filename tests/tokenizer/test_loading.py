"""The bound a tokenizer's vocabulary puts on a prompt's length: sound, or absent."""

from __future__ import annotations

import math
import random

import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from tercet.tokenizer.loading import load_tokenizer, max_bytes_per_token
from tercet.tokenizer.tercet_tokenizer import TercetTokenizer


@pytest.fixture(scope="module")
def smollm2_tokenizer(tiny_llama_dir):
    return load_tokenizer(str(tiny_llama_dir))


def random_texts(seed: int = 0):
    generator = random.Random(seed)
    pieces = ["Hello", " world", "\n", "    ", "日本語", "naïve", "🙂", "#" * 200, " " * 300, "<|im_start|>",
              "=" * 90, "0123456789", "\t\t", "ĊĠ", "é" * 50]
    for _ in range(200):
        yield "".join(generator.choice(pieces) for _ in range(generator.randint(1, 40)))


def test_smollm2s_longest_token_bounds_every_prompt(smollm2_tokenizer):
    bound = max_bytes_per_token(smollm2_tokenizer)
    # Its longest token is a newline and 80 spaces (the byte-level vocabulary spells bytes as characters).
    assert bound == 81
    for text in random_texts():
        num_tokens = len(smollm2_tokenizer.encode(text))
        assert num_tokens >= math.ceil(len(text.encode()) / bound), text


def wrap(backend: Tokenizer) -> TercetTokenizer:
    return TercetTokenizer(backend, name_or_path="synthetic")


def bpe(**options) -> Tokenizer:
    vocab = {"a": 0, "b": 1, "ab": 2, "[UNK]": 3}
    return Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], **options))


def test_a_pipeline_that_keeps_every_byte_has_a_bound():
    backend = bpe(unk_token="[UNK]")
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # "[UNK]" is the longest token's text: 5 bytes.
    assert max_bytes_per_token(wrap(backend)) == 5


@pytest.mark.parametrize(
    "why, build",
    [
        ("strips accents", lambda t: setattr(t, "normalizer", normalizers.BertNormalizer())),
        ("composes characters", lambda t: setattr(t, "normalizer", normalizers.NFC())),
        ("replaces text by a shorter text", lambda t: setattr(t, "normalizer", normalizers.Replace("  ", " "))),
        ("drops whitespace", lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Whitespace())),
        ("removes what it splits on", lambda t: setattr(
            t, "pre_tokenizer", pre_tokenizers.Split(" ", behavior="removed"))),
    ],
)
def test_a_pipeline_that_can_shrink_the_text_has_no_bound(why, build):
    backend = bpe()
    build(backend)
    assert max_bytes_per_token(wrap(backend)) is None, why


def test_an_unknown_token_that_swallows_a_run_of_characters_leaves_no_bound():
    assert max_bytes_per_token(wrap(bpe(unk_token="[UNK]", fuse_unk=True))) is None
    assert max_bytes_per_token(wrap(bpe(unk_token="[UNK]", fuse_unk=True, byte_fallback=True))) is not None


def test_only_bpe_vocabularies_are_bounded():
    word_level = Tokenizer(models.WordLevel(vocab={"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    assert max_bytes_per_token(wrap(word_level)) is None


def test_an_added_token_that_takes_the_whitespace_beside_it_leaves_no_bound():
    backend = bpe()
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    assert max_bytes_per_token(wrap(backend)) is None
