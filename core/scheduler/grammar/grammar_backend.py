"""The contract between the scheduler and a grammar backend plugin (constrained decoding).

A request may constrain its output (``SamplingParams.json_schema``, ``regex``
or ``ebnf``). The scheduler hands the constraint to the configured backend,
off its loop, to compile once for the served tokenizer (compiled grammars are
cached by constraint); each of the request's completions then gets its own
matcher. Every step, each constrained row's matcher writes the tokens it
allows into a bitmask, the sampler masks the row's logits with it, and the
sampled token advances the matcher. Rows without a constraint pay nothing.

A request whose answer follows the model's reasoning (a reasoning parser is
set, :mod:`tercet.reasoning`) has its JSON Schema applied after the reasoning:
the backend compiles it with :meth:`GrammarBackend.compile_after_reasoning`,
a grammar that allows a free reasoning span first.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tercet.reasoning.parser import ReasoningFrame

if TYPE_CHECKING:
    import torch

# The most tokens a scheduler takes back from a matcher at once (a request's drafts of one step).
MAX_ROLLBACK = 32


class GrammarError(ValueError):
    """A constraint the backend cannot compile; the message names the problem."""


@dataclass(frozen=True)
class GrammarTokenizer:
    """What a backend needs to know about the served vocabulary."""

    tokenizer_json: str  # the tokenizers library's serialised tokenizer
    vocab_size: int  # the model's logits width (may exceed the tokenizer's)
    eos_token_ids: frozenset[int]


class GrammarMatcher(abc.ABC):
    """One completion's position in its grammar."""

    # Whether :meth:`rollback` works. Only then does a constrained request speculate: its
    # drafts are checked by advancing the matcher through them, then taking them back.
    can_roll_back: bool = False

    def rollback(self, num_tokens: int) -> None:
        """Take back the last ``num_tokens`` tokens :meth:`accept` took (at most
        ``MAX_ROLLBACK``, more than ``[speculative] k`` can be); the matcher is then where it was before them."""
        raise NotImplementedError(f"{type(self).__name__} cannot roll back")

    @abc.abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into ``bitmask[row]`` (int32 words, bit ``t % 32``
        of word ``t // 32`` for token ``t``); the EOS tokens once the grammar may end.
        Raise :class:`GrammarError` when the constraint cannot go on (a parser limit): a 400."""

    @abc.abstractmethod
    def accept(self, token_id: int) -> bool:
        """Advance past ``token_id``; False when the grammar does not allow it. Raise
        :class:`GrammarError` when the constraint itself cannot go on (the vocabulary
        cannot write what it needs next): the request then ends with a 400, not a 500."""

    @abc.abstractmethod
    def is_complete(self) -> bool:
        """The output so far is a whole match: nothing but EOS may follow."""


class GrammarBackend(abc.ABC):
    """Compiles constraints for one tokenizer. ``compile`` runs in one of several compile
    threads, and may be abandoned (past ``grammar.compile_timeout``, or its requests
    aborted) but never interrupted: it should release the GIL and bound its own work."""

    @abc.abstractmethod
    def compile(self, kind: str, text: str) -> object:
        """A compiled grammar for ``kind`` ("json_schema", "regex" or "ebnf") and its text;
        raise :class:`GrammarError` naming the problem when it cannot be compiled."""

    def compile_after_reasoning(self, kind: str, text: str, frame: ReasoningFrame) -> object:
        """A compiled grammar for the constraint, after a free span of reasoning: the
        output is ``frame.start``, any text without ``frame.end``, ``frame.end`` and a
        little whitespace, then the constraint; that span is optional unless
        ``frame.start`` is "" (the prompt opened the reasoning). A backend that cannot
        keeps the default, which refuses such requests with a 400."""
        raise GrammarError(f"the grammar backend {type(self).__name__} cannot apply a constraint after the "
                           "model's reasoning; send separate_reasoning: false to constrain the whole output")

    @abc.abstractmethod
    def matcher(self, compiled: object) -> GrammarMatcher:
        """A fresh matcher at the start of ``compiled``."""
