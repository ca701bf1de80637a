"""A constraint after the model's reasoning, on llguidance and the served tokenizer."""

import json

import pytest

from tercet.formats.default_model import find_default_gguf
from tercet.plugins.llguidance_grammar.backend import LlguidanceBackend
from tercet.reasoning.parser import ReasoningFrame
from tercet.scheduler.grammar.grammar_backend import GrammarError, GrammarTokenizer
from tercet.tokenizer.loading import load_tokenizer

THINK = ReasoningFrame("<think>", "</think>")
STARTED = ReasoningFrame("", "</think>")
SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(find_default_gguf()))


@pytest.fixture(scope="module")
def backend(tokenizer):
    return LlguidanceBackend(GrammarTokenizer(tokenizer.backend_tokenizer.to_str(), 49152, frozenset({2})))


def walks(backend, tokenizer, compiled, text: str) -> tuple[bool, bool]:
    """(every token of ``text`` accepted, the grammar may end there)."""
    matcher = backend.matcher(compiled)
    try:
        accepted = all(matcher.accept(token_id) for token_id in tokenizer.encode(text))
    except GrammarError:
        return False, False
    return accepted, accepted and matcher.matcher.is_accepting()


@pytest.mark.parametrize("text, complete", [
    ('<think>What is {"a": 2}?</think>\n\n{"a": 1}', True),
    ('{"a": 1}', True),  # the reasoning is optional when the model opens it
    ('<think>unfinished', False),
])
def test_the_schema_applies_after_the_reasoning(backend, tokenizer, text, complete):
    compiled = backend.compile_after_reasoning("json_schema", SCHEMA, THINK)
    assert walks(backend, tokenizer, compiled, text) == (True, complete)


@pytest.mark.parametrize("text", ['<think>x</think>hello', '<think>a</think>b</think>{"a": 1}', 'hi {"a": 1}',
                                  '<think>a</think>        {"a": 1}'])
def test_anything_else_after_the_reasoning_is_refused(backend, tokenizer, text):
    compiled = backend.compile_after_reasoning("json_schema", SCHEMA, THINK)
    assert walks(backend, tokenizer, compiled, text)[0] is False


def test_a_model_that_starts_inside_must_close_its_reasoning(backend, tokenizer):
    compiled = backend.compile_after_reasoning("regex", "[A-Z][a-z]+", STARTED)
    assert walks(backend, tokenizer, compiled, "hmm <think> x</think>Hello") == (True, True)
    assert walks(backend, tokenizer, compiled, "Hello") == (True, False)  # still reasoning


def test_a_grammar_after_reasoning(backend, tokenizer):
    compiled = backend.compile_after_reasoning("ebnf", 'root ::= "left" | "right"', THINK)
    assert walks(backend, tokenizer, compiled, "<think>which way</think>left") == (True, True)
    assert walks(backend, tokenizer, compiled, "<think></think>up")[0] is False
