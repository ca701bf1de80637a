"""The llguidance grammar backend on the served tokenizer: masks, EOS, errors, copies."""

import json

import pytest
import torch

from tercet.formats.default_model import find_default_gguf
from tercet.model.token_bitmask import allowed_tokens, new_bitmask
from tercet.plugins.llguidance_grammar.backend import LlguidanceBackend
from tercet.scheduler.grammar.grammar_backend import GrammarError, GrammarTokenizer
from tercet.tokenizer.loading import load_tokenizer

EOS = 2


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(find_default_gguf()))


@pytest.fixture(scope="module")
def backend(tokenizer):
    return LlguidanceBackend(GrammarTokenizer(tokenizer.backend_tokenizer.to_str(), 49152, frozenset({EOS})))


def allowed(matcher) -> torch.Tensor:
    bitmask = new_bitmask(1, 49152)
    matcher.fill_bitmask(bitmask, 0)
    return allowed_tokens(bitmask, 49152)[0]


def test_a_valid_document_walks_through_and_only_then_may_end(backend, tokenizer):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    matcher = backend.matcher(backend.compile("json_schema", json.dumps(schema)))
    document = tokenizer.encode('{"ok": true}')
    assert not allowed(matcher)[tokenizer.encode("[")[0]]
    for token_id in document:
        assert allowed(matcher)[token_id] and not allowed(matcher)[EOS]
        assert matcher.accept(token_id)
    assert allowed(matcher)[EOS]
    assert matcher.is_complete()


def test_each_request_gets_its_own_matcher_from_one_compile(backend, tokenizer):
    compiled = backend.compile("regex", "(yes|no)")
    first, second = backend.matcher(compiled), backend.matcher(compiled)
    assert first.accept(tokenizer.encode("yes")[0])
    # The second is still at the start: "no" is allowed there, not after "yes".
    no = tokenizer.encode("no")[0]
    assert allowed(second)[no] and not allowed(first)[no]


@pytest.mark.parametrize("kind, text, says", [
    ("json_schema", '{"type": "nonsense"}', "Invalid type: nonsense"),
    ("json_schema", "not json", "is not valid JSON"),
    ("json_schema", '{"type": "integer", "minimum": 10, "maximum": 5}', "cannot be compiled"),
    ("regex", "[0-9]{4}-(", "unclosed group"),
])
def test_a_constraint_that_cannot_compile_names_its_problem(backend, kind, text, says):
    with pytest.raises(GrammarError, match=says.replace("(", r"\(").replace("[", r"\[")):
        backend.compile(kind, text)


def test_an_ebnf_grammar(backend, tokenizer):
    matcher = backend.matcher(backend.compile("ebnf", 'root ::= "left" | "right"'))
    mask = allowed(matcher)
    assert mask[tokenizer.encode("left")[0]] and not mask[tokenizer.encode("up")[0]]


def test_a_constraint_the_vocabulary_cannot_write_is_the_requests_error(backend, tokenizer):
    # U+40000 is the bytes F1 80 80 80, and SmolLM2's vocabulary has no token for the byte F1.
    assert "ñ" not in tokenizer.backend_tokenizer.get_vocab()
    # Where every output must start with it, the compile already says so.
    with pytest.raises(GrammarError, match="cannot be met with this model's vocabulary"):
        backend.compile("regex", "\U00040000")
    # Further on, the token that leads there says so.
    matcher = backend.matcher(backend.compile("regex", "(a|b)\U00040000"))
    assert matcher.accept(tokenizer.encode("a")[0])
    [token_id] = allowed(matcher).nonzero().flatten().tolist()
    with pytest.raises(GrammarError, match="cannot be met with this model's vocabulary"):
        matcher.accept(token_id)


def test_a_schema_past_the_parser_limits_is_refused_as_such_when_compiled(backend):
    # 600 optional properties: after "{" a row of about 2,400 Earley items, over llguidance's 2,000.
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(600)}}
    with pytest.raises(GrammarError, match="too complex for the grammar backend's parser limits") as refusal:
        backend.compile("json_schema", json.dumps(schema))
    assert "vocabulary" not in str(refusal.value)


def test_rollback_takes_back_what_accept_took_eos_included(backend, tokenizer):
    matcher = backend.matcher(backend.compile("regex", "(yes|no)+"))
    yes, no = tokenizer.encode("yes")[0], tokenizer.encode("no")[0]
    assert matcher.can_roll_back
    assert matcher.accept(yes)
    at_yes = allowed(matcher)
    # EOS is taken without llguidance consuming it (the model's EOS is not its own): rollback skips it.
    assert matcher.accept(no) and matcher.accept(EOS)
    matcher.rollback(2)
    assert torch.equal(allowed(matcher), at_yes)
    matcher.rollback(1)
    assert allowed(matcher)[yes] and not allowed(matcher)[EOS]
