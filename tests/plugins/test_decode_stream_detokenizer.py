"""The decode_stream strategy, and the contract both built-in strategies keep:
streamed deltas plus the final flush are exactly ``tokenizer.decode(ids)``."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins import decode_stream_detokenizer, incremental_detokenizer
from tercet.plugins.decode_stream_detokenizer import DecodeStreamDetokenizer
from tercet.plugins.incremental_detokenizer import IncrementalDetokenizer

STRATEGIES = [IncrementalDetokenizer, DecodeStreamDetokenizer]
VOCAB_SIZE = 49152
# Characters that take 2-4 UTF-8 bytes, and U+FFFD itself, which a streaming
# decoder must not confuse with a character still cut in half.
TRICKY_CHARACTERS = "日本語中文한국어éß—🙂🚀👨‍👩‍👧\ufffd"
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    from tercet.tokenizer.loading import load_tokenizer

    return load_tokenizer(str(default_model_dir))


@pytest.fixture(scope="module")
def single_byte_token_ids(tokenizer):
    """Ids of the byte-level tokens that stand for one raw byte >= 0x80: any
    sequence of them is arbitrary, mostly invalid or incomplete, UTF-8."""
    ids = []
    for token, token_id in tokenizer.get_vocab().items():
        if len(token) == 1 and len(tokenizer.decode([token_id]).encode("utf-8", "surrogatepass")) != 1:
            ids.append(token_id)
    assert len(ids) >= 64
    return sorted(ids)


def stream(detokenizer, rid, token_ids, chunk_sizes):
    deltas, position, index = [], 0, 0
    while position < len(token_ids):
        size = chunk_sizes[index % len(chunk_sizes)] if chunk_sizes else 1
        deltas.append(detokenizer.append(rid, token_ids[position : position + size]))
        position += size
        index += 1
    deltas.append(detokenizer.finish(rid))
    return deltas


def assert_streams_exactly(tokenizer, strategy, token_ids, skip_special_tokens, chunk_sizes):
    detokenizer = strategy(tokenizer)
    detokenizer.start("r", skip_special_tokens=skip_special_tokens)
    deltas = stream(detokenizer, "r", token_ids, chunk_sizes)
    assert "".join(deltas) == tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    assert detokenizer.states == {}


chunk_sizes = st.lists(st.integers(1, 6), max_size=6)


@pytest.mark.parametrize("strategy", STRATEGIES)
@HYPOTHESIS
@given(
    token_ids=st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=32),
    skip_special_tokens=st.booleans(),
    chunk_sizes=chunk_sizes,
)
def test_random_vocab_ids(tokenizer, strategy, token_ids, skip_special_tokens, chunk_sizes):
    assert_streams_exactly(tokenizer, strategy, token_ids, skip_special_tokens, chunk_sizes)


@pytest.mark.parametrize("strategy", STRATEGIES)
@HYPOTHESIS
@given(data=st.data(), skip_special_tokens=st.booleans(), chunk_sizes=chunk_sizes)
def test_raw_bytes_and_special_tokens(tokenizer, single_byte_token_ids, strategy, data, skip_special_tokens, chunk_sizes):
    pieces = st.one_of(st.sampled_from(single_byte_token_ids), st.integers(0, 16), st.integers(0, VOCAB_SIZE - 1))
    token_ids = data.draw(st.lists(pieces, max_size=32))
    assert_streams_exactly(tokenizer, strategy, token_ids, skip_special_tokens, chunk_sizes)


@pytest.mark.parametrize("strategy", STRATEGIES)
@HYPOTHESIS
@given(
    text=st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(TRICKY_CHARACTERS)), max_size=40),
    chunk_sizes=chunk_sizes,
)
def test_encoded_unicode_text(tokenizer, strategy, text, chunk_sizes):
    # Not every code point survives encoding (unassigned planes do not), so
    # the reference is the decode of the ids, not the text.
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    assert_streams_exactly(tokenizer, strategy, token_ids, True, chunk_sizes)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("text", ["plain \ufffd inside", "ends with \ufffd", "\ufffd\ufffd", "日本🙂\ufffd語"])
def test_text_that_really_contains_the_replacement_character(tokenizer, strategy, text):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = strategy(tokenizer)
    detokenizer.start("r")
    assert "".join(stream(detokenizer, "r", token_ids, [1])) == text


@pytest.mark.parametrize("text", ["日本語のテキスト", "🙂🚀👨‍👩‍👧", "mixed 中文 and emoji 🙂."])
def test_no_half_character_is_ever_streamed(tokenizer, text):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = DecodeStreamDetokenizer(tokenizer)
    detokenizer.start("r")
    deltas = stream(detokenizer, "r", token_ids, [1])
    assert "".join(deltas) == text
    assert not any("\ufffd" in delta for delta in deltas)


def test_requests_are_independent(tokenizer):
    texts = {"a": "The capital of France is Paris.", "b": "日本語と🙂 emoji", "c": ""}
    ids = {rid: tokenizer.encode(text, add_special_tokens=False) for rid, text in texts.items()}
    detokenizer = DecodeStreamDetokenizer(tokenizer)
    pieces = {rid: [] for rid in texts}
    for rid in texts:
        detokenizer.start(rid, skip_special_tokens=True)
    for i in range(max(map(len, ids.values()))):
        for rid, token_ids in ids.items():
            if i < len(token_ids):
                pieces[rid].append(detokenizer.append(rid, [token_ids[i]]))
    for rid in texts:
        pieces[rid].append(detokenizer.finish(rid))
    assert {rid: "".join(p) for rid, p in pieces.items()} == texts
    assert detokenizer.states == {}


def test_special_tokens_follow_the_request_setting(tokenizer):
    token_ids = [tokenizer.bos_token_id, *tokenizer.encode("Hi", add_special_tokens=False), tokenizer.eos_token_id]
    for skip in (True, False):
        assert_streams_exactly(tokenizer, DecodeStreamDetokenizer, token_ids, skip, [1])
    detokenizer = DecodeStreamDetokenizer(tokenizer)
    detokenizer.start("r", skip_special_tokens=False)
    assert "".join(stream(detokenizer, "r", token_ids, [1])) == tokenizer.decode(token_ids) != "Hi"


def test_a_failing_stream_still_delivers_everything_at_finish(tokenizer):
    class BrokenStream:
        def step(self, backend_tokenizer, token_ids):
            raise RuntimeError("invalid prefix")

    token_ids = tokenizer.encode("Hello there", add_special_tokens=False)
    detokenizer = DecodeStreamDetokenizer(tokenizer)
    detokenizer.start("r")
    detokenizer.states["r"].stream = BrokenStream()
    deltas = stream(detokenizer, "r", token_ids, [1])
    assert deltas[:-1] == [""] * len(token_ids) and deltas[-1] == "Hello there"


def test_registered_as_decode_stream_beside_incremental():
    plugin_manager = create_plugin_manager(load_entry_points=False)
    plugin_manager.register(decode_stream_detokenizer)
    plugin_manager.register(incremental_detokenizer)
    registry = PluginRegistries.from_plugin_manager(plugin_manager).detokenizers
    assert registry.names() == ["decode_stream", "incremental"]
    assert registry.get("decode_stream") is DecodeStreamDetokenizer


def test_a_third_party_strategy_sits_beside_it():
    class Upper:
        @hookimpl
        def register_detokenizers(self, register):
            register("upper", object)

    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[decode_stream_detokenizer, Upper()])
    assert PluginRegistries.from_plugin_manager(plugin_manager).detokenizers.names() == ["decode_stream", "upper"]


def test_found_through_the_entry_point():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).detokenizers
    assert registry.get("decode_stream") is DecodeStreamDetokenizer


def test_a_plain_tokenizers_tokenizer_works_too(tokenizer):
    backend = tokenizer.backend_tokenizer
    token_ids = tokenizer.encode("日本🙂 ok", add_special_tokens=False)
    detokenizer = DecodeStreamDetokenizer(backend)
    detokenizer.start("r")
    assert "".join(stream(detokenizer, "r", token_ids, [1])) == "日本🙂 ok"


def test_a_tokenizer_without_a_rust_backend_is_refused():
    with pytest.raises(TypeError, match="fast"):
        DecodeStreamDetokenizer(object())
