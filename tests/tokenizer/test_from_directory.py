"""Checkpoint directories are read as transformers reads them: special tokens, added tokens, templates."""

from __future__ import annotations

import json

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from tercet.errors import ConfigError
from tercet.tokenizer.loading import load_tokenizer

VOCAB = {"[UNK]": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4, ".": 5, "don": 6, "'": 7, "t": 8, "!": 9, "a": 10}
TEXTS = ["hello world.", "<s>hello</s>", "<extra> a <img>", "don ' t !", "hello<pad>world", ""]


def write_directory(path, config: dict, *, special_tokens_map: dict | None = None, bpe: bool = False,
                    files: dict[str, str] | None = None):
    if bpe:
        backend = Tokenizer(models.BPE(vocab=VOCAB, merges=[], unk_token="[UNK]"))
    else:
        backend = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(cleanup=False)
    backend.add_special_tokens([AddedToken("[UNK]", special=True)])
    path.mkdir()
    backend.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **config}))
    if special_tokens_map is not None:
        (path / "special_tokens_map.json").write_text(json.dumps(special_tokens_map))
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(exist_ok=True)
        (path / name).write_text(text)
    return path


def assert_same_as_transformers(directory):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(directory))
    ours = load_tokenizer(str(directory))
    for text in TEXTS:
        assert ours.encode(text) == reference.encode(text), text
        token_ids = reference.encode(text)
        for skip in (True, False):
            assert ours.decode(token_ids, skip_special_tokens=skip) == reference.decode(
                token_ids, skip_special_tokens=skip), text
    assert ours.get_added_vocab() == reference.get_added_vocab()
    assert ours.all_special_tokens == reference.all_special_tokens
    assert ours.all_special_ids == reference.all_special_ids
    assert ours.special_tokens_map == reference.special_tokens_map
    assert len(ours) == len(reference)
    return ours, reference


def test_tokens_the_config_adds_to_tokenizer_json(tmp_path):
    config = {
        "bos_token": "<s>",  # in the vocabulary but not an added token: it becomes a special added token
        "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        "pad_token": "<pad>",  # not in the vocabulary at all
        "unk_token": "[UNK]",
        "image_token": "<img>",  # model-specific
        "extra_special_tokens": ["<extra>"],
        "added_tokens_decoder": {
            "11": {"content": "<img>", "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
                   "special": True},
            "12": {"content": "<plain>", "lstrip": False, "rstrip": False, "normalized": True, "single_word": False,
                   "special": False},
        },
    }
    ours, _ = assert_same_as_transformers(write_directory(tmp_path / "t", config))
    assert ours.image_token == "<img>" and ours.image_token_id == 11 and ours.pad_token_id is not None
    assert ours.cls_token is None and ours.cls_token_id is None


def test_special_tokens_map_of_an_older_checkpoint(tmp_path):
    special_tokens_map = {"bos_token": "<s>", "eos_token": {"content": "</s>", "normalized": False},
                          "additional_special_tokens": ["<extra>"]}
    ours, _ = assert_same_as_transformers(
        write_directory(tmp_path / "t", {"unk_token": "[UNK]"}, special_tokens_map=special_tokens_map))
    assert ours.eos_token == "</s>" and "<extra>" in ours.all_special_tokens


@pytest.mark.parametrize("bpe", [False, True])
def test_clean_up_tokenization_spaces_is_skipped_for_bpe(tmp_path, bpe):
    ours, _ = assert_same_as_transformers(
        write_directory(tmp_path / "t", {"clean_up_tokenization_spaces": True, "unk_token": "[UNK]"}, bpe=bpe))
    decoded = ours.decode(ours.encode("hello . don ' t !"))
    if bpe:
        assert " . " in decoded and " ' t !" in decoded
    else:
        assert decoded == "hello. don't!"


def test_chat_template_sources_and_their_precedence(tmp_path):
    in_config = {"chat_template": "config {{ messages[0].content }}"}
    jinja = {"chat_template.jinja": "jinja {{ messages[0].content }}"}
    processor = {"chat_template.json": json.dumps({"chat_template": "processor {{ messages[0].content }}"})}
    named = {"chat_template": [{"name": "default", "template": "A {{ messages[0].content }}"},
                               {"name": "tool_use", "template": "B {{ tools | length }}"}]}
    extra = {**jinja, "additional_chat_templates/tool_use.jinja": "tools {{ tools | length }}"}
    conversation = [{"role": "user", "content": "x"}]
    cases = [(in_config, {}, "config x"), (in_config, jinja, "jinja x"), ({}, processor, "processor x"),
             (in_config, processor, "config x"), (named, {}, "A x"), ({}, extra, "jinja x")]
    for index, (config, files, expected) in enumerate(cases):
        tokenizer = load_tokenizer(str(write_directory(tmp_path / str(index), config, files=files)))
        assert tokenizer.apply_chat_template(conversation, tokenize=False) == expected, (config, files)
    for index in (4, 5):
        tokenizer = load_tokenizer(str(tmp_path / str(index)))
        with_tools = tokenizer.apply_chat_template(conversation, tools=[{"name": "f"}], tokenize=False)
        assert with_tools == ("B 1" if index == 4 else "tools 1")
        assert tokenizer.apply_chat_template(conversation, chat_template="tool_use", tools=[], tokenize=False)[-1] == "0"


def test_a_directory_without_tokenizer_json_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        load_tokenizer(str(tmp_path))


def test_a_model_without_a_chat_template_says_so(tmp_path):
    tokenizer = load_tokenizer(str(write_directory(tmp_path / "t", {})))
    with pytest.raises(ValueError, match="no chat template"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)


def test_padding_and_truncation_in_tokenizer_json_are_not_applied(tmp_path):
    # all-MiniLM-L6-v2's tokenizer.json pads and truncates to 128; transformers applies neither unless asked.
    directory = write_directory(tmp_path / "fixed", {"unk_token": "[UNK]", "pad_token": "[UNK]"})
    backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
    backend.enable_padding(length=8, pad_id=0, pad_token="[UNK]")
    backend.enable_truncation(max_length=2)
    backend.save(str(directory / "tokenizer.json"))
    ours, _ = assert_same_as_transformers(directory)
    assert ours.encode("hello world . a") == [3, 4, 5, 10]
