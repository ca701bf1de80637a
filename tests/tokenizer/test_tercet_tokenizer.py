"""tercet's tokenizer gives what transformers' AutoTokenizer gives, on the default model.

Both of tercet's sources are checked against transformers loading the
checkpoint directory: the directory itself, and the GGUF it was converted
from (the directory's tokenizer is transformers' conversion of that GGUF).
"""

from __future__ import annotations

import random

import pytest

from tercet.tokenizer.byte_level import byte_level_characters
from tercet.tokenizer.loading import load_tokenizer
from tercet.tokenizer.tercet_tokenizer import TercetTokenizer

TEXTS = [
    "", " ", "Hello world", "  two leading spaces", "trailing spaces   ", "\n\n\tx\r\n", " " * 83, "\t" * 9,
    "日本語のテキスト", "naïve café", "e\u0301 (a combining accent)", "a\u00a0b\u2009c", "Ω≈ç√∫ ∑ ∞",
    "🙂 👍🏽 👨‍👩‍👧 🏳️‍🌈", "0123456789", "3.14159 1,000,000 2024-06-01 0x1F", "007 1e-9",
    "don't I'm we've they're y'all", "a . b , c ! d ? e", "\x00\x01\x7f control bytes",
    "<|im_start|>user\nhi<|im_end|>\n", "x<|endoftext|>y", "<|im_start|><|im_start|>", "<repo_name>a<file_sep>b",
    "<|im_start", "im_end|>", "< |im_end| >", "ĠĊ Ġ Ċ", "def f(x):\n    return x ** 2\n",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> there"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "日本語? 🙂\n\n  spaced  "}],
    [{"role": "assistant", "content": "I start the conversation"}],
    [{"role": "user", "content": "", "name": None}, {"role": "assistant", "content": " ", "tool_calls": None}],
]


@pytest.fixture(scope="module")
def reference(default_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir)


@pytest.fixture(scope="module", params=["directory", "gguf"])
def ours(request, default_model_dir, tmp_path_factory) -> TercetTokenizer:
    if request.param == "directory":
        return load_tokenizer(str(default_model_dir))
    from tercet.formats.default_model import find_default_gguf
    from tercet.tokenizer.from_gguf import tokenizer_files, tokenizer_from_files

    gguf_path = find_default_gguf()
    return tokenizer_from_files(tokenizer_files(gguf_path), str(gguf_path))


def random_texts(seed: int = 0, count: int = 150):
    generator = random.Random(seed)
    for _ in range(count):
        yield "".join(generator.choice(TEXTS) for _ in range(generator.randint(1, 6)))


def test_encode_matches(ours, reference):
    for text in [*TEXTS, *random_texts()]:
        for add_special_tokens in (True, False):
            assert ours.encode(text, add_special_tokens=add_special_tokens) == reference.encode(
                text, add_special_tokens=add_special_tokens), text


def test_decode_matches_on_encoded_text_and_on_random_ids(ours, reference):
    generator = random.Random(1)
    runs = [reference.encode(text) for text in TEXTS]
    runs += [[generator.randrange(len(reference)) for _ in range(generator.randint(1, 24))] for _ in range(300)]
    runs += [[], [0, 1, 2, 3], [2] * 5]
    for token_ids in runs:
        for skip in (True, False):
            assert ours.decode(token_ids, skip_special_tokens=skip) == reference.decode(
                token_ids, skip_special_tokens=skip), token_ids


def test_decoding_invalid_utf8_matches(ours, reference):
    # Lone continuation bytes, lead bytes with nothing after them, half an emoji (F0 9F): each is one
    # token of the byte-level vocabulary (which has no tokens for bytes UTF-8 never uses, such as FF).
    characters = byte_level_characters()
    pieces = [b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0", b"\xf0\x9f"]
    token_ids = [ours.backend_tokenizer.token_to_id("".join(characters[b] for b in piece)) for piece in pieces]
    assert None not in token_ids
    emoji = reference.encode("🙂", add_special_tokens=False)
    for run in [*([t] for t in token_ids), token_ids, emoji[:1], emoji[:-1] + [2], [2, *emoji[:1], 1]]:
        assert ours.decode(run) == reference.decode(run), run
        assert ours.decode(run, skip_special_tokens=True) == reference.decode(run, skip_special_tokens=True)
    assert ours.decode(token_ids[0]) == reference.decode(token_ids[0])  # a bare int


def test_ids_to_tokens_and_back(ours, reference):
    generator = random.Random(2)
    token_ids = [0, 1, 2, 16, 17, *(generator.randrange(len(reference)) for _ in range(500)), len(reference) + 3]
    assert ours.convert_ids_to_tokens(token_ids) == reference.convert_ids_to_tokens(token_ids)
    assert ours.convert_ids_to_tokens(token_ids, skip_special_tokens=True) == reference.convert_ids_to_tokens(
        token_ids, skip_special_tokens=True)
    assert [ours.convert_ids_to_tokens(t) for t in token_ids] == [reference.convert_ids_to_tokens(t) for t in token_ids]
    tokens = ["<|im_end|>", "Ġthe", "hello", "not-a-token"]
    assert ours.convert_tokens_to_ids(tokens) == reference.convert_tokens_to_ids(tokens)


def test_vocabulary_and_special_tokens_match(ours, reference):
    assert len(ours) == len(reference) and ours.vocab_size == reference.vocab_size
    assert ours.get_added_vocab() == reference.get_added_vocab()
    assert ours.get_vocab() == reference.get_vocab()
    assert ours.all_special_tokens == reference.all_special_tokens
    assert ours.all_special_ids == reference.all_special_ids
    assert ours.special_tokens_map == reference.special_tokens_map
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        assert getattr(ours, name) == getattr(reference, name), name
        assert getattr(ours, f"{name}_id") == getattr(reference, f"{name}_id"), name
    assert ours.chat_template == reference.chat_template
    assert ours.backend_tokenizer.to_str() == reference.backend_tokenizer.to_str()


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches(ours, reference, conversation, add_generation_prompt):
    text = ours.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert text == reference.apply_chat_template(
        conversation, add_generation_prompt=add_generation_prompt, tokenize=False)
    expected = reference.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt, tokenize=True)
    expected_ids = list(expected["input_ids"])
    assert ours.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt) == expected_ids
    as_dict = ours.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt, return_dict=True)
    assert as_dict == {"input_ids": expected_ids, "attention_mask": list(expected["attention_mask"])}


def test_template_variables_and_an_explicit_template_match(ours, reference):
    template = "{{ bos_token }}|{{ eos_token }}|{{ greeting }}|{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    conversation = [{"role": "user", "content": "é <b> & \"q\""}]
    for chat_template in (template, None):
        assert ours.apply_chat_template(conversation, chat_template=chat_template, tokenize=False, greeting="hé") == (
            reference.apply_chat_template(conversation, chat_template=chat_template, tokenize=False, greeting="hé"))


def test_template_errors_are_raised_as_by_transformers(ours, reference):
    import jinja2

    refusing = "{% if messages[0].role != 'system' %}{{ raise_exception('a system message first') }}{% endif %}"
    for tokenizer in (ours, reference):
        with pytest.raises(jinja2.TemplateError, match="a system message first"):
            tokenizer.apply_chat_template([{"role": "user", "content": "x"}], chat_template=refusing, tokenize=False)
        with pytest.raises(jinja2.UndefinedError):  # content None is left out, and the template needs it
            tokenizer.apply_chat_template([{"role": "assistant", "content": None}], tokenize=False)
        with pytest.raises(ValueError):
            tokenizer.apply_chat_template([], tokenize=False)


def test_the_tokenizer_is_usable_as_the_server_uses_it(ours):
    # Weak references (token_strings_for), instance attributes patched by tests, len().
    import weakref

    weakref.ref(ours)
    assert len(ours) == 49152 and ours.eos_token_id == 2 and ours.name_or_path
    with pytest.raises(AttributeError):
        _ = ours.no_such_attribute
