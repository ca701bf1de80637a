import pytest

from tercet.bench import BenchError
from tercet.bench.workload import load_tokenizer, ordinary_token_ids, synthetic_requests


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return load_tokenizer(default_model_dir)


def test_prompts_are_reproducible_from_the_seed(tokenizer):
    first = synthetic_requests(tokenizer, 4, 32, 8, seed=7)
    assert synthetic_requests(tokenizer, 4, 32, 8, seed=7) == first
    assert [request.prompt for request in synthetic_requests(tokenizer, 4, 32, 8, seed=8)] != [
        request.prompt for request in first
    ]


@pytest.mark.parametrize("input_len", [1, 2, 7, 32, 128, 700])
def test_prompts_encode_to_exactly_the_asked_length(tokenizer, input_len):
    requests = synthetic_requests(tokenizer, 16, input_len, 4, seed=0)
    for request in requests:
        assert request.prompt_len == input_len
        # Encoded as a server encodes a text prompt.
        assert len(tokenizer.encode(request.prompt)) == input_len
        assert request.output_len == 4


def test_prompts_are_distinct_and_use_no_special_tokens(tokenizer):
    requests = synthetic_requests(tokenizer, 64, 16, 4, seed=0)
    assert len({request.prompt for request in requests}) == 64
    special = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    for request in requests:
        assert not special & set(tokenizer.encode(request.prompt))


def test_the_first_prompts_do_not_depend_on_how_many_are_asked_for(tokenizer):
    assert synthetic_requests(tokenizer, 3, 24, 4, seed=1) == synthetic_requests(tokenizer, 9, 24, 4, seed=1)[:3]


def test_warmup_prompts_differ_from_measured_ones(tokenizer):
    measured = {request.prompt for request in synthetic_requests(tokenizer, 8, 24, 4, seed=0)}
    warmup = {request.prompt for request in synthetic_requests(tokenizer, 8, 24, 4, seed=0, kind="warmup")}
    assert not measured & warmup


def test_ordinary_vocabulary_leaves_out_special_and_added_tokens(tokenizer):
    ordinary = ordinary_token_ids(tokenizer)
    assert tokenizer.eos_token_id not in ordinary
    assert not set(tokenizer.get_added_vocab().values()) & set(ordinary)
    assert len(ordinary) == len(tokenizer) - len(set(tokenizer.get_added_vocab().values()) | set(tokenizer.all_special_ids))


def test_default_tokenizer_is_the_default_models_from_its_gguf(default_model_dir):
    from tercet.formats.default_model import find_default_gguf

    default = load_tokenizer(None)
    assert default.name_or_path == str(find_default_gguf())
    # The same tokens as the dequantized checkpoint's tokenizer: the prompts do not change.
    text = "A prompt, with digits 12345 and émoji 🙂."
    assert default.encode(text) == load_tokenizer(default_model_dir).encode(text)


def test_a_directory_without_a_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(BenchError, match="cannot load a tokenizer"):
        load_tokenizer(tmp_path)
