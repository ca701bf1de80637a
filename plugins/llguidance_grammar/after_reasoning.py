"""A constraint after the model's reasoning, as one llguidance grammar.

llguidance takes several grammars at once, the first the start, and a Lark
rule may call another by name (``@name``). The grammar made here is a Lark
start rule — the reasoning span as one lexeme, then the constraint's own
grammar — followed by the constraint's grammars, unchanged. Being one lexeme,
``<think>`` … ``</think>`` is matched byte by byte whatever the tokens: a token
that closes the reasoning and opens the answer (``</think>{"``) is allowed only
when both halves are.
"""

from __future__ import annotations

import json

from tercet.plugin_api import ReasoningFrame

CONSTRAINT = "tercet_constraint"
ANY_TEXT = r"/(.|\n)*/"
# Models put a blank line or two between their reasoning and their answer; bounded,
# so a model cannot pad for ever.
GAP = r"/[ \t\r\n]{0,4}/"


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _grammars(grammar: str) -> list[dict]:
    """llguidance's grammar text (a TopLevelGrammar's JSON, or Lark) as its list of grammars."""
    grammar = grammar.strip()
    if grammar.startswith("{"):
        return json.loads(grammar)["grammars"]
    return [{"lark_grammar": grammar}]


def after_reasoning(grammar: str, frame: ReasoningFrame) -> str:
    """``grammar`` preceded by a reasoning span written as ``frame`` says."""
    constraint, *others = _grammars(grammar)
    # Any text that does not contain the end marker, then the end marker.
    inside = f"({ANY_TEXT} & ~({ANY_TEXT} {_literal(frame.end)} {ANY_TEXT}))"
    opening = _literal(frame.start) if frame.start else ""
    optional = "?" if frame.start else ""  # a model that starts inside must close its reasoning
    start = (f"%llguidance {{}}\nstart: REASONING{optional} @{CONSTRAINT}\n"
             f"REASONING: {opening} {inside} {_literal(frame.end)} {GAP}\n")
    return json.dumps({"grammars": [{"lark_grammar": start}, {**constraint, "name": CONSTRAINT}, *others]})
