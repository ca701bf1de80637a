"""``text_offset`` from token bytes: tokens that split a character, checked on the real tokenizer."""

from __future__ import annotations

import bisect
import functools
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.http.logprobs_format import TokenStrings, completion_logprobs
from tercet.http.text_offsets import TextOffsets
from tercet.ipc.messages import TokenLogprobs
from tercet.tokenizer.byte_level import byte_level_characters

# "☕" is three byte-level tokens, " \xe2", "\x98" and "\x95", each decoded as "�".
SPLIT_PROMPT = "Café ☕ naïve 🙂 done"


@functools.cache
def default_tokenizer():
    import tercet.formats.default_model
    import tercet.tokenizer.loading

    return tercet.tokenizer.loading.load_tokenizer(str(tercet.formats.default_model.find_default_gguf()))


@functools.cache
def bytes_in_the_vocabulary() -> frozenset[int]:
    vocabulary = default_tokenizer().get_vocab()
    return frozenset(byte for byte, char in byte_level_characters().items() if char in vocabulary)


@pytest.fixture(scope="module")
def tokenizer():
    return default_tokenizer()


@pytest.fixture(scope="module")
def strings(tokenizer):
    return TokenStrings(tokenizer)


def served_offsets(strings: TokenStrings, token_ids: list[int]) -> list[int]:
    """What /v1/completions reports for these tokens echoed (max_tokens 0)."""
    logprobs = TokenLogprobs(token_ids, [None] + [-1.0] * (len(token_ids) - 1), [])
    return completion_logprobs(strings, logprobs, 0)["text_offset"]


def expected_offsets(text: str, token_bytes: list[bytes]) -> list[int]:
    """Per token, the index of the character its first byte belongs to (computed from the text)."""
    char_starts = []  # byte position where each character starts
    position = 0
    for char in text:
        char_starts.append(position)
        position += len(char.encode("utf-8"))
    offsets, first_byte = [], 0
    for piece in token_bytes:
        offsets.append(bisect.bisect_right(char_starts, first_byte) - 1)
        first_byte += len(piece)
    return offsets


def assert_offsets_cut_the_text(text: str, offsets: list[int]) -> None:
    """The rule docs/api.md states: from 0, never decreasing, and the slices between give the text back."""
    assert offsets[0] == 0
    assert all(a <= b for a, b in itertools.pairwise(offsets))
    assert offsets[-1] <= len(text)
    ends = [*offsets[1:], len(text)]
    assert "".join(text[start:end] for start, end in zip(offsets, ends)) == text


def test_the_split_character_prompt(tokenizer, strings):
    token_ids = tokenizer.encode(SPLIT_PROMPT, add_special_tokens=False)
    tokens = [strings.text(token_id) for token_id in token_ids]
    assert tokens == ["C", "af", "é", " \ufffd", "\ufffd", "\ufffd", " na", "ïve", " 🙂", " done"]
    offsets = served_offsets(strings, token_ids)
    # " \xe2" starts at the space; "\x98" and "\x95" at "☕" (5), which "\x95" completes.
    assert offsets == [0, 1, 3, 4, 5, 5, 6, 9, 12, 14]
    assert_offsets_cut_the_text(SPLIT_PROMPT, offsets)


@pytest.mark.parametrize(
    "pieces, text, offsets",
    [
        ([b"\xf0\x9f", b"\x99", b"\x82!"], "🙂!", [0, 0, 0]),
        # Invalid bytes count as the "\ufffd" each becomes in the text (errors="replace").
        ([b"a\xe2", b"b"], "a\ufffdb", [0, 2]),
        ([b"\x98", b"x"], "\ufffdx", [0, 1]),
        ([b"\xe2", b"\xe2\x98\x95"], "\ufffd☕", [0, 1]),
        ([b"ab", b"", b"c"], "abc", [0, 2, 2]),
    ],
)
def test_offsets_follow_the_decoding_of_the_bytes(pieces, text, offsets):
    assert b"".join(pieces).decode("utf-8", errors="replace") == text
    text_offsets = TextOffsets()
    assert [text_offsets.place(piece) for piece in pieces] == offsets


def spelled_by_the_vocabulary(char: str) -> bool:
    # SmolLM2's vocabulary lacks 21 of the 256 bytes (a few C0 controls, and
    # lead bytes 0xF1, 0xF2 of planes 4-11, unassigned) and its tokenizer drops
    # them: such text has no tokens to place, so it is left out here.
    return bytes_in_the_vocabulary().issuperset(char.encode("utf-8"))


# Random text heavy in what splits between tokens: emoji (4 bytes, with joiners and
# variation selectors), combining marks, CJK, and any code point but a surrogate.
CHARACTERS = st.one_of(
    st.characters(codec="utf-8"),
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),
    st.characters(min_codepoint=0x0300, max_codepoint=0x036F),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
    st.sampled_from(" \n\t\u200d\ufe0fé"),
).filter(spelled_by_the_vocabulary)
TEXTS = st.text(alphabet=CHARACTERS, min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=64), max_size=4))
def test_random_text_offsets_point_at_the_character_of_each_tokens_first_byte(tokenizer, strings, text, cuts):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    token_bytes = [bytes(strings.bytes(token_id)) for token_id in token_ids]
    assert b"".join(token_bytes) == text.encode("utf-8")  # the tokenizer is lossless here
    offsets = served_offsets(strings, token_ids)
    assert offsets == expected_offsets(text, token_bytes)
    assert_offsets_cut_the_text(text, offsets)
    # A stream cuts the tokens into chunks; one TextOffsets across them gives the same offsets.
    text_offsets = TextOffsets()
    bounds = [0, *sorted(cut for cut in cuts if cut < len(token_ids)), len(token_ids)]
    streamed = []
    for start, end in itertools.pairwise(bounds):
        chunk = TokenLogprobs(token_ids[start:end], [-1.0] * (end - start), [])
        streamed += completion_logprobs(strings, chunk, 0, text_offsets)["text_offset"]
    assert streamed == offsets
