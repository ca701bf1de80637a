from __future__ import annotations

import math

import pytest

from tercet.http.logprobs_format import (
    BYTE_LEVEL_ALPHABET,
    LOWEST_LOGPROB,
    TokenStrings,
    chat_logprobs,
    completion_logprobs,
    native_token_logprobs,
    native_top_logprobs,
    token_strings_for,
)
from tercet.http.text_offsets import TextOffsets
from tercet.ipc.messages import TokenLogprobs

# A byte-level BPE vocabulary: "Ġ" is the space, "Ã©" the two bytes of "é",
# and "ä¸" / "ĸ" split the three bytes of "世" across two tokens.
BYTE_LEVEL_PIECES = {0: "<|end|>", 1: "ĠHi", 2: "Ã©", 3: "ä¸", 4: "ĸ", 5: "Ċ", 6: "Ġa"}


class ByteLevelTokenizer:
    def convert_ids_to_tokens(self, token_ids):
        if isinstance(token_ids, int):
            return BYTE_LEVEL_PIECES[token_ids]
        return [BYTE_LEVEL_PIECES[t] for t in token_ids]

    def encode(self, text, add_special_tokens=True):
        return {" a\n": [6, 5]}[text]

    def decode(self, token_ids, skip_special_tokens=False):
        raw = bytes(BYTE_LEVEL_ALPHABET[char] for t in token_ids for char in BYTE_LEVEL_PIECES[t])
        return raw.decode("utf-8", errors="replace")


class WordTokenizer:
    """Not byte-level: bytes come from the decoded text (or SentencePiece's <0xNN>)."""

    WORDS = {0: "▁hello", 1: "<0x0A>", 2: "é"}

    def convert_ids_to_tokens(self, token_ids):
        return self.WORDS[token_ids] if isinstance(token_ids, int) else [self.WORDS[t] for t in token_ids]

    def encode(self, text, add_special_tokens=True):
        return [0]

    def decode(self, token_ids, skip_special_tokens=False):
        return "".join({0: " hello", 1: "\n", 2: "é"}[t] for t in token_ids)


def test_byte_level_alphabet_covers_every_byte_once():
    assert sorted(BYTE_LEVEL_ALPHABET.values()) == list(range(256))
    assert BYTE_LEVEL_ALPHABET["Ġ"] == 0x20 and BYTE_LEVEL_ALPHABET["Ċ"] == 0x0A and BYTE_LEVEL_ALPHABET["a"] == ord("a")


def test_byte_level_tokens_report_their_exact_bytes():
    strings = TokenStrings(ByteLevelTokenizer())
    assert strings.is_byte_level
    assert (strings.text(1), strings.bytes(1)) == (" Hi", [0x20, 0x48, 0x69])
    assert (strings.text(2), strings.bytes(2)) == ("é", [0xC3, 0xA9])
    # Half a character: the text is a replacement character, the bytes are exact.
    assert strings.bytes(3) + strings.bytes(4) == list("世".encode())
    assert strings.text(0) == "<|end|>" and strings.bytes(0) == list(b"<|end|>")


def test_other_tokenizers_fall_back_to_the_decoded_text():
    strings = TokenStrings(WordTokenizer())
    assert not strings.is_byte_level
    assert (strings.text(0), strings.bytes(0)) == (" hello", list(b" hello"))
    assert strings.bytes(1) == [0x0A]
    assert strings.bytes(2) == [0xC3, 0xA9]


def test_token_strings_are_shared_per_tokenizer():
    tokenizer = ByteLevelTokenizer()
    assert token_strings_for(tokenizer) is token_strings_for(tokenizer)


def test_the_real_tokenizer(default_model_dir):
    from tercet.tokenizer.loading import load_tokenizer

    tokenizer = load_tokenizer(str(default_model_dir))
    strings = TokenStrings(tokenizer)
    assert strings.is_byte_level
    text = " héllo 世界\n"
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    assert b"".join(bytes(strings.bytes(t)) for t in token_ids) == text.encode()
    assert [strings.text(t) for t in token_ids] == [tokenizer.decode([t]) for t in token_ids]


# -- formats ---------------------------------------------------------------------

PROMPT = TokenLogprobs([1, 6], [None, -0.5], [[], [[6, -0.5], [1, -1.5], [5, -2.0]]])
OUTPUT = TokenLogprobs([2, 5], [-0.25, -3.0], [[[2, -0.25], [1, -2.0]], [[6, -1.0], [1, -2.0]]])


def strings():
    return TokenStrings(ByteLevelTokenizer())


def test_completion_logprobs_with_prompt_first():
    block = completion_logprobs(strings(), TokenLogprobs.concat([PROMPT, OUTPUT]), 2)
    assert block == {
        "tokens": [" Hi", " a", "é", "\n"],
        "token_logprobs": [None, -0.5, -0.25, -3.0],
        # The chosen token is always there, besides the 2 most likely: "\n" is a third entry.
        "top_logprobs": [None, {" a": -0.5, " Hi": -1.5}, {"é": -0.25, " Hi": -2.0}, {" a": -1.0, " Hi": -2.0, "\n": -3.0}],
        "text_offset": [0, 3, 5, 6],
    }


def test_completion_logprobs_zero_top_still_has_the_chosen_token_and_offsets_continue():
    offsets = TextOffsets()
    completion_logprobs(strings(), PROMPT, 0, offsets)  # " Hi a": 5 characters
    block = completion_logprobs(strings(), OUTPUT, 0, offsets)
    assert block["top_logprobs"] == [{"é": -0.25}, {"\n": -3.0}]
    assert block["text_offset"] == [5, 6]


def test_a_character_split_between_tokens_is_counted_once():
    # "ä¸" + "ĸ" are the three bytes of "世": two "�" tokens, one character of " Hi世\n".
    block = completion_logprobs(strings(), TokenLogprobs([1, 3, 4, 5], [None, -1.0, -1.0, -1.0], []), 0)
    assert block["tokens"] == [" Hi", "\ufffd", "\ufffd", "\n"]
    assert block["text_offset"] == [0, 3, 3, 4]
    # Split across two chunks of a stream, the same.
    offsets = TextOffsets()
    first = completion_logprobs(strings(), TokenLogprobs([1, 3], [None, -1.0], []), 0, offsets)
    second = completion_logprobs(strings(), TokenLogprobs([4, 5], [-1.0, -1.0], []), 0, offsets)
    assert first["text_offset"] + second["text_offset"] == [0, 3, 3, 4]


def test_chat_logprobs():
    block = chat_logprobs(strings(), OUTPUT, 1)
    assert block == {
        "content": [
            {"token": "é", "logprob": -0.25, "bytes": [0xC3, 0xA9], "top_logprobs": [{"token": "é", "logprob": -0.25, "bytes": [0xC3, 0xA9]}]},
            {"token": "\n", "logprob": -3.0, "bytes": [0x0A], "top_logprobs": [{"token": " a", "logprob": -1.0, "bytes": [0x20, 0x61]}]},
        ],
        "refusal": None,
    }
    assert all(entry["top_logprobs"] == [] for entry in chat_logprobs(strings(), OUTPUT, 0)["content"])


def test_native_logprobs():
    assert native_token_logprobs(None, PROMPT) == [[None, 1], [-0.5, 6]]
    assert native_top_logprobs(None, PROMPT, 2) == [None, [[-0.5, 6], [-1.5, 1]]]
    assert native_token_logprobs(strings(), OUTPUT) == [[-0.25, 2, "é"], [-3.0, 5, "\n"]]


def test_non_finite_logprobs_become_a_json_number():
    block = completion_logprobs(strings(), TokenLogprobs([2], [-math.inf], [[[2, -math.inf]]]), 1)
    assert block["token_logprobs"] == [LOWEST_LOGPROB] and block["top_logprobs"] == [{"é": LOWEST_LOGPROB}]


@pytest.mark.parametrize("top", [[], None])
def test_missing_alternatives_are_empty(top):
    logprobs = TokenLogprobs([2], [-0.25], top)
    assert chat_logprobs(strings(), logprobs, 5)["content"][0]["top_logprobs"] == []
