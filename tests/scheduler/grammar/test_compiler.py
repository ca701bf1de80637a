"""Constrained decoding in the scheduler: compiled off the loop, masks on constrained rows only."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from tercet.ipc.messages import AbortReq, TokenizedGenerateReq
from tercet.reasoning.parser import ReasoningFrame
from tercet.scheduler.grammar.grammar_backend import GrammarError
from tercet.sampling_params import SamplingParams
from tercet.tokenizer.loading import load_tokenizer

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "age"],
    "additionalProperties": False,
})


def params(max_new_tokens=60, temperature=1.0, **extra):
    return SamplingParams(**{"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": 7, **extra})


def run(harness, *messages):
    """Every request's output ids and finish reason."""
    for message in messages:
        harness.send(message)
    tokens, reasons = {}, {}
    for _ in range(500):
        for output in harness.step():
            for rid, new_ids, reason in zip(output.rids, output.new_token_ids, output.finished_reasons):
                tokens.setdefault(rid, []).extend(new_ids)
                if reason is not None:
                    reasons[rid] = reason
        scheduler = harness.scheduler
        if not (scheduler.queues.has_requests or scheduler.grammars.pending):
            return tokens, reasons
    raise AssertionError("requests did not finish")


def test_a_json_schema_makes_the_output_valid_json_of_that_schema(harness, tiny_llama_dir):
    tokenizer = load_tokenizer(str(tiny_llama_dir))
    tokens, reasons = run(harness, *[
        TokenizedGenerateReq(f"r{seed}", [5, 6, 7], params(json_schema=SCHEMA, seed=seed)) for seed in range(3)
    ])
    for rid in ("r0", "r1", "r2"):
        # The grammar ended the output: a whole match, finished as "stop".
        assert reasons[rid].kind == "stop"
        document = json.loads(tokenizer.decode(tokens[rid]))
        assert set(document) == {"name", "age"} and 0 <= document["age"] <= 99 and len(document["name"]) <= 6


def test_unconstrained_rows_are_untouched_by_a_constrained_neighbour(make_harness):
    alone, beside = make_harness(), make_harness()
    plain = TokenizedGenerateReq("plain", [9, 8, 7, 6], params(20, temperature=0.0, ignore_eos=True))
    tokens_alone, _ = run(alone, plain)
    tokens_beside, _ = run(beside, plain, TokenizedGenerateReq("json", [5, 6, 7], params(json_schema=SCHEMA)))
    assert tokens_beside["plain"] == tokens_alone["plain"]


def test_a_regex_and_n_completions_each_with_its_own_matcher(harness, tiny_llama_dir):
    tokenizer = load_tokenizer(str(tiny_llama_dir))
    tokens, reasons = run(harness, TokenizedGenerateReq("phone", [5, 6, 7], params(regex=r"\d{3}-\d{4}", n=2)))
    assert set(reasons) == {"phone#0", "phone#1"}
    for rid in reasons:
        assert re.fullmatch(r"\d{3}-\d{4}", tokenizer.decode(tokens[rid]))


def test_a_schema_that_cannot_compile_fails_its_request_alone_with_a_400(harness):
    _, reasons = run(
        harness,
        TokenizedGenerateReq("bad", [5, 6, 7], params(json_schema='{"type": "nonsense"}')),
        TokenizedGenerateReq("good", [5, 6, 7], params(8, ignore_eos=True)),
    )
    assert reasons["bad"].status_code == 400
    # The scheduler names the parameter; each HTTP route renames it to its own field.
    assert reasons["bad"].param == "json_schema"
    assert reasons["bad"].message.startswith("json_schema: ") and "nonsense" in reasons["bad"].message
    assert reasons["good"].kind == "length"


def test_compiled_grammars_are_cached_by_constraint(harness):
    run(harness, TokenizedGenerateReq("first", [5, 6], params(regex="(yes|no)")))
    compiled = dict(harness.scheduler.grammars._cache)
    run(harness, TokenizedGenerateReq("second", [5, 6], params(regex="(yes|no)")))
    assert dict(harness.scheduler.grammars._cache) == compiled and len(compiled) == 1


def test_a_request_aborted_while_its_grammar_compiles_ends_at_once(harness):
    harness.send(TokenizedGenerateReq("slow", [5, 6, 7], params(json_schema=SCHEMA)))
    harness.send(AbortReq("slow"))
    while harness.num_received < harness.num_sent:
        assert harness.scheduler.receiver.poll(5000)
        for message in harness.scheduler.receiver.receive_pending():
            harness.scheduler.dispatch(message)
            harness.num_received += 1
    assert not harness.scheduler.grammars.pending
    harness.scheduler.run_step()
    outputs = harness.outputs.receive_pending() if harness.outputs.poll(5000) else []
    reasons = [reason for output in outputs for reason in output.finished_reasons if reason]
    assert [reason.kind for reason in reasons] == ["abort"]


class RaisingMatcher:
    def fill_bitmask(self, bitmask, row):
        raise RuntimeError("a bug in the grammar backend")

    def accept(self, token_id):
        raise RuntimeError("a bug in the grammar backend")

    def is_complete(self):
        return False


class RaisingBackend:
    def compile(self, kind, text):
        return text

    def matcher(self, compiled):
        if compiled == "no matcher":
            raise RuntimeError("a bug in the grammar backend")
        return RaisingMatcher()


def test_a_raising_grammar_backend_ends_only_the_requests_it_serves(harness):
    harness.scheduler.grammars._backend = RaisingBackend()
    _, reasons = run(
        harness,
        TokenizedGenerateReq("masked", [5, 6, 7], params(regex="a+")),
        TokenizedGenerateReq("unmade", [5, 6, 7], params(regex="no matcher")),
        TokenizedGenerateReq("plain", [5, 6, 7], params(6, ignore_eos=True)),
    )
    assert reasons["masked"].status_code == 500
    assert reasons["unmade"].status_code == 500 and "grammar backend failed" in reasons["unmade"].message
    assert reasons["plain"].kind == "length"
    counts = harness.scheduler.failures.as_dict()
    assert counts["by_kind"]["grammar"] == 1 and counts["by_plugin"] == {"llguidance_grammar": 1}


def test_a_constraint_the_vocabulary_cannot_write_ends_its_request_with_a_400(harness):
    _, reasons = run(
        harness,
        TokenizedGenerateReq("astral", [5, 6, 7], params(regex="\U00040000")),
        TokenizedGenerateReq("good", [5, 6, 7], params(8, ignore_eos=True)),
    )
    assert reasons["astral"].status_code == 400 and reasons["astral"].param == "regex"
    assert "vocabulary" in reasons["astral"].message
    assert reasons["good"].kind == "length"


class GatedBackend:
    """Compiles "slow" only once its gate opens; anything else at once."""

    def __init__(self):
        self.gate = threading.Event()
        self.compiled = []

    def compile(self, kind, text):
        if text == "slow":
            assert self.gate.wait(60)
        self.compiled.append(text)
        return text

    def matcher(self, compiled):
        return RaisingMatcher() if compiled == "raising" else PlainMatcher()


class PlainMatcher(RaisingMatcher):
    def fill_bitmask(self, bitmask, row):
        bitmask[row] = -1

    def accept(self, token_id):
        return True

    def is_complete(self):
        return True


def finished_reasons(harness, rids: set[str]) -> dict:
    """Step (as the loop does, without waiting for compiles) until every one of ``rids`` finished."""
    harness.deliver()
    reasons = {}
    deadline = time.monotonic() + 60
    while not rids <= reasons.keys():
        assert time.monotonic() < deadline, f"still unfinished: {rids - reasons.keys()}"
        harness.scheduler.run_step()
        for output in harness.outputs.receive_pending() if harness.outputs.poll(10) else []:
            reasons.update((rid, reason) for rid, reason in zip(output.rids, output.finished_reasons) if reason)
    return reasons


@pytest.fixture
def gated(harness):
    backend = GatedBackend()
    harness.scheduler.grammars._backend = backend
    yield harness, backend
    backend.gate.set()


def test_a_compile_past_its_time_limit_fails_its_request_alone_with_a_400_naming_the_limit(gated):
    harness, backend = gated
    harness.scheduler.grammars.compile_timeout = 0.2
    harness.send(TokenizedGenerateReq("slow", [5, 6, 7], params(regex="slow")))
    harness.send(TokenizedGenerateReq("quick", [5, 6, 7], params(4, regex="quick")))
    reasons = finished_reasons(harness, {"slow", "quick"})
    assert reasons["slow"].status_code == 400 and reasons["slow"].param == "regex"
    assert "grammar.compile_timeout (0.2 s)" in reasons["slow"].message
    # The quick one compiled beside it, and ran.
    assert reasons["quick"].kind == "stop" and "quick" in backend.compiled
    # The slow compile was written off: it holds no place in the pool, and is not cached.
    assert harness.scheduler.grammars.pool.num_written_off == 1
    assert ("regex", "slow") not in harness.scheduler.grammars._cache


def test_an_aborted_request_writes_its_compile_off(gated):
    harness, backend = gated
    grammars = harness.scheduler.grammars
    grammars.pool.num_workers = 1
    harness.send(TokenizedGenerateReq("slow", [5, 6, 7], params(regex="slow")))
    harness.deliver()
    assert grammars.pool.num_running == 1
    harness.send(AbortReq("slow"))
    # With the one place taken, the next compile could start only because the first was written off.
    harness.send(TokenizedGenerateReq("next", [5, 6, 7], params(4, regex="next")))
    reasons = finished_reasons(harness, {"slow", "next"})
    assert reasons["slow"].kind == "abort" and reasons["next"].kind == "stop"
    assert grammars.pool.num_written_off == 1


def test_a_request_sharing_a_compile_keeps_it_when_the_other_is_aborted(gated):
    harness, backend = gated
    harness.send(TokenizedGenerateReq("gone", [5, 6, 7], params(regex="slow")))
    harness.send(TokenizedGenerateReq("stays", [5, 6, 7], params(4, regex="slow")))
    harness.send(AbortReq("gone"))
    harness.deliver()
    assert harness.scheduler.grammars.pool.num_written_off == 0
    backend.gate.set()
    reasons = finished_reasons(harness, {"gone", "stays"})
    assert reasons["gone"].kind == "abort" and reasons["stays"].kind == "stop"


class RecordingBackend(RaisingBackend):
    """Compiles nothing: records what it was asked, and makes a matcher that allows anything."""

    def __init__(self):
        self.compiled = []

    def compile(self, kind, text):
        self.compiled.append((kind, text))
        return text

    def compile_after_reasoning(self, kind, text, frame):
        self.compiled.append((kind, text, frame))
        return text


def test_an_object_schema_is_closed_unless_the_config_allows_extra_properties(harness):
    open_schema = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
    backend = harness.scheduler.grammars._backend = RecordingBackend()
    harness.scheduler.grammars._compile(("json_schema", open_schema, None, None))
    assert json.loads(backend.compiled[-1][1])["additionalProperties"] is False
    harness.scheduler.grammars.allow_extra_properties = True
    harness.scheduler.grammars._compile(("json_schema", open_schema, None, None))
    assert backend.compiled[-1] == ("json_schema", open_schema)


def test_a_reasoning_frame_compiles_the_constraint_after_the_reasoning(harness):
    backend = harness.scheduler.grammars._backend = RecordingBackend()
    harness.scheduler.grammars._compile(("regex", "a+", "<think>", "</think>"))
    assert backend.compiled[-1] == ("regex", "a+", ReasoningFrame("<think>", "</think>"))
    # A backend that cannot refuses such a request with a 400.
    harness.scheduler.grammars._backend = RaisingBackend()
    _, reasons = run(harness, TokenizedGenerateReq(
        "after", [5, 6, 7], params(regex="a+", reasoning_start="<think>", reasoning_end="</think>")))
    assert reasons["after"].status_code == 400 and "separate_reasoning" in reasons["after"].message


def test_a_schema_without_additional_properties_gets_only_its_keys(harness, tiny_llama_dir):
    # What `llm --schema 'name, age int'` sends: properties, and nothing about other keys.
    schema = json.dumps({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}})
    tokenizer = load_tokenizer(str(tiny_llama_dir))
    grammars = harness.scheduler.grammars

    def takes(text: str) -> bool:
        matcher = grammars.backend.matcher(grammars._compile(("json_schema", schema, None, None)))
        try:
            return all(matcher.accept(token_id) for token_id in tokenizer.encode(text, add_special_tokens=False))
        except GrammarError:
            return False

    assert takes('{"name": "Rex", "age": 3}')
    assert not takes('{"name": "Rex", "description": "')
    grammars.allow_extra_properties = True
    assert takes('{"name": "Rex", "description": "')
