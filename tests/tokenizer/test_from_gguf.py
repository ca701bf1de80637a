"""A tokenizer built from GGUF metadata equals transformers' conversion of the same file."""

from __future__ import annotations

import json

import pytest
from small_gguf import write_gguf

from tercet.errors import ConfigError
from tercet.formats.default_model import find_default_gguf
from tercet.tokenizer.byte_level import spell_in_byte_level
from tercet.tokenizer.from_gguf import tokenizer_files, tokenizer_from_files, tokenizer_pipeline
from tercet.tokenizer.loading import load_tokenizer


def normalized(tokenizer_json: str) -> dict:
    """The pipeline as the tokenizers library writes it back, so spelling differences in the JSON do not count."""
    from tokenizers import Tokenizer

    return json.loads(Tokenizer.from_str(tokenizer_json).to_str())


def test_the_default_models_pipeline_is_its_converted_tokenizer_json(default_model_dir):
    files = tokenizer_files(find_default_gguf())
    assert normalized(files["tokenizer.json"]) == normalized((default_model_dir / "tokenizer.json").read_text())
    assert files["chat_template.jinja"] == (default_model_dir / "chat_template.jinja").read_text()
    config = json.loads((default_model_dir / "tokenizer_config.json").read_text())
    assert json.loads(files["tokenizer_config.json"]) == {
        name: config[name] for name in ("bos_token", "eos_token", "unk_token", "pad_token")}


def test_the_default_model_equals_transformers_conversion_of_the_gguf():
    from transformers import AutoTokenizer

    gguf_path = find_default_gguf()
    reference = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    ours = tokenizer_from_files(tokenizer_files(gguf_path), str(gguf_path))
    assert ours.backend_tokenizer.to_str() == reference.backend_tokenizer.to_str()
    assert ours.special_tokens_map == reference.special_tokens_map
    assert ours.all_special_ids == reference.all_special_ids
    assert ours.chat_template == reference.chat_template


@pytest.mark.parametrize("add_bos, add_eos, add_space_prefix", [
    (True, None, None), (False, None, None), (None, None, None), (True, True, None), (False, True, True),
])
def test_small_ggufs_equal_transformers_conversion(tmp_path, add_bos, add_eos, add_space_prefix):
    from transformers import AutoTokenizer

    gguf_path = write_gguf(tmp_path / "small.gguf", add_bos=add_bos, add_eos=add_eos, add_space_prefix=add_space_prefix)
    reference = AutoTokenizer.from_pretrained(tmp_path, gguf_file=gguf_path.name)
    ours = tokenizer_from_files(tokenizer_files(gguf_path), str(gguf_path))
    assert json.loads(ours.backend_tokenizer.to_str()) == json.loads(reference.backend_tokenizer.to_str())
    for text in ["ab ab hello world", "<think>x</s><s>", "<ctrl one> é 日本", "", "<|endoftext|>"]:
        for add_special_tokens in (True, False):
            assert ours.encode(text, add_special_tokens) == reference.encode(text, add_special_tokens=add_special_tokens)
        token_ids = reference.encode(text)
        for skip in (True, False):
            assert ours.decode(token_ids, skip_special_tokens=skip) == reference.decode(
                token_ids, skip_special_tokens=skip)
    assert ours.get_added_vocab() == reference.get_added_vocab()
    assert ours.all_special_ids == reference.all_special_ids
    conversation = [{"role": "user", "content": "ab"}]
    assert ours.apply_chat_template(conversation, tokenize=False) == reference.apply_chat_template(
        conversation, tokenize=False)


def test_respelled_and_mislabelled_tokens(tmp_path):
    pipeline, _ = tokenizer_pipeline(_metadata(write_gguf(tmp_path / "m.gguf", add_bos=False)), "m.gguf")
    vocab = pipeline["model"]["vocab"]
    # A space and CJK characters are not byte-level characters: the tokens are respelled as their bytes.
    assert "helloĠworld" in vocab and spell_in_byte_level("日本") in vocab
    assert "hello world" not in vocab and "日本" not in vocab
    added = {token["content"]: token["special"] for token in pipeline["added_tokens"]}
    # "<ctrl one>" is marked control but spelled outside the alphabet: a mislabel, left ordinary.
    assert added == {"<|endoftext|>": True, "<s>": True, "</s>": True, "<think>": False}


def _metadata(path):
    from tercet.formats.gguf_file import GgufFile

    with GgufFile(path) as gguf:
        return gguf.metadata


@pytest.mark.parametrize("change, message", [
    ({"model": "llama"}, "byte-level BPE"),
    ({"pre": "llama-bpe"}, "tokenizer.ggml.pre 'llama-bpe'"),
    ({"merges": ("ab",)}, "two tokens joined by a space"),
])
def test_what_tercet_cannot_convert_is_refused_by_name(tmp_path, change, message):
    gguf_path = write_gguf(tmp_path / "m.gguf", add_bos=False, **change)
    with pytest.raises(ConfigError, match=message):
        tokenizer_files(gguf_path)


def test_a_special_token_id_out_of_range_is_refused(tmp_path):
    metadata = _metadata(write_gguf(tmp_path / "m.gguf", add_bos=False))
    metadata["tokenizer.ggml.eos_token_id"] = len(metadata["tokenizer.ggml.tokens"])
    with pytest.raises(ConfigError, match="eos_token_id"):
        tokenizer_pipeline(metadata, "m.gguf")


def test_load_tokenizer_takes_a_gguf_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TERCET_CACHE_DIR", str(tmp_path / "cache"))
    gguf_path = write_gguf(tmp_path / "m.gguf", add_bos=True)
    tokenizer = load_tokenizer(str(gguf_path))
    assert tokenizer.name_or_path == str(gguf_path)
    assert tokenizer.encode("ab") == [1, 8] and tokenizer.bos_token == "<s>"
    with pytest.raises(ConfigError, match="checkpoint directory or a .gguf file"):
        load_tokenizer(str(tmp_path / "missing.gguf"))
