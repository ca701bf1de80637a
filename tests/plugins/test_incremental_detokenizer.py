import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tercet.plugins.incremental_detokenizer import IncrementalDetokenizer

TEXTS = [
    "The capital of France is Paris.",
    "日本語のテキストと中文混合 🙂🚀 émojis and accents — ok",
    "  leading spaces\nand\ttabs  ",
]


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    from tercet.tokenizer.loading import load_tokenizer

    return load_tokenizer(str(default_model_dir))


def stream(detokenizer, rid, token_ids, chunk=1):
    deltas = [detokenizer.append(rid, token_ids[i:i + chunk]) for i in range(0, len(token_ids), chunk)]
    deltas.append(detokenizer.finish(rid))
    return deltas


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("chunk", [1, 3])
def test_deltas_join_to_the_full_decode(tokenizer, text, chunk):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = IncrementalDetokenizer(tokenizer)
    detokenizer.start("r", skip_special_tokens=True)
    deltas = stream(detokenizer, "r", token_ids, chunk)
    assert "".join(deltas) == tokenizer.decode(token_ids, skip_special_tokens=True) == text
    assert not any("\ufffd" in delta for delta in deltas)


def test_requests_are_independent_and_forgotten(tokenizer):
    detokenizer = IncrementalDetokenizer(tokenizer)
    a, b = (tokenizer.encode(t, add_special_tokens=False) for t in TEXTS[:2])
    detokenizer.start("a")
    detokenizer.start("b")
    pieces = {"a": [], "b": []}
    for i in range(max(len(a), len(b))):
        if i < len(a):
            pieces["a"].append(detokenizer.append("a", [a[i]]))
        if i < len(b):
            pieces["b"].append(detokenizer.append("b", [b[i]]))
    pieces["a"].append(detokenizer.finish("a"))
    pieces["b"].append(detokenizer.finish("b"))
    assert "".join(pieces["a"]) == TEXTS[0] and "".join(pieces["b"]) == TEXTS[1]
    assert detokenizer.states == {}


def test_special_tokens_follow_the_request_setting(tokenizer):
    token_ids = tokenizer.encode("Hi", add_special_tokens=False) + [tokenizer.eos_token_id]
    for skip in (True, False):
        detokenizer = IncrementalDetokenizer(tokenizer)
        detokenizer.start("r", skip_special_tokens=skip)
        text = "".join(stream(detokenizer, "r", token_ids))
        assert text == tokenizer.decode(token_ids, skip_special_tokens=skip)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token_ids=st.lists(st.integers(min_value=0, max_value=49151), max_size=24))
def test_random_token_sequences_decode_exactly(tokenizer, token_ids):
    detokenizer = IncrementalDetokenizer(tokenizer)
    detokenizer.start("r", skip_special_tokens=False)
    assert "".join(stream(detokenizer, "r", token_ids)) == tokenizer.decode(token_ids, skip_special_tokens=False)


@pytest.mark.parametrize("text", ["日本語のテキスト", "🙂🚀👨‍👩‍👧", "mixed 中文 and emoji 🙂."])
def test_no_half_character_is_ever_streamed(tokenizer, text):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = IncrementalDetokenizer(tokenizer)
    detokenizer.start("r")
    deltas = stream(detokenizer, "r", token_ids)
    assert "".join(deltas) == text
    assert not any("\ufffd" in delta for delta in deltas)


@pytest.mark.parametrize("text", ["ends with \ufffd", "\ufffd in the middle", "日本\ufffd🙂"])
def test_text_that_really_contains_the_replacement_character(tokenizer, text):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = IncrementalDetokenizer(tokenizer)
    detokenizer.start("r")
    deltas = stream(detokenizer, "r", token_ids)
    assert "".join(deltas) == text
    if text.endswith("\ufffd"):
        # Held back as a possibly cut character until the request ends.
        assert deltas[-1].endswith("\ufffd")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    token_ids=st.lists(st.one_of(st.integers(0, 16), st.integers(0, 49151)), max_size=32),
    skip_special_tokens=st.booleans(),
    chunk=st.integers(1, 5),
)
def test_random_sequences_in_random_chunks(tokenizer, token_ids, skip_special_tokens, chunk):
    detokenizer = IncrementalDetokenizer(tokenizer)
    detokenizer.start("r", skip_special_tokens=skip_special_tokens)
    text = "".join(stream(detokenizer, "r", token_ids, chunk))
    assert text == tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    assert detokenizer.states == {}


def test_registered_as_incremental():
    from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
    from tercet.plugins import incremental_detokenizer

    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[incremental_detokenizer])
    registry = PluginRegistries.from_plugin_manager(plugin_manager).detokenizers
    assert registry.names() == ["incremental"] and registry.get("incremental") is IncrementalDetokenizer
