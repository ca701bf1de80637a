"""Fuzz a real server with schemathesis, driven by tercet's own OpenAPI document.

Every operation gets requests generated from its schema: valid ones
(positive) and ones that break it (negative: wrong types, missing fields,
values past the documented limits). However odd the request, the server must
answer it without a 5xx and keep serving afterwards, and the document and the
parsers must agree: a request that breaks the schema is refused (4xx). On the
control routes a valid request must also be served (2xx); the generation
routes have rules no schema states (min_tokens <= max_tokens, the context
length, a prompt that tokenizes to nothing…), so a valid-looking request may
still be a 400 there.

schemathesis only generates the cases here (plain hypothesis drives them), so
the test does not depend on schemathesis's pytest integration, which lags
behind new pytest releases.

Besides the random cases, schemathesis's coverage phase sends each operation
with a body its systematic cases: for every property at every depth, the
values at its bounds and values of each wrong type (an object where a string
belongs, a list for an enum). Random cases seldom break a value nested inside
a list or a ``oneOf``; these do, once each, so a ``tool_choice.type`` of ``{}``
on ``/v1/messages`` or an input item's ``role`` of ``{}`` on ``/v1/responses``
(both once a 500) is always sent. Only the protocols bridged to chat
completions (``BRIDGED_PATHS``) get the valid cases too; elsewhere they would
only repeat what the random cases send, at the cost of a generation each.

The schema is the document's fuzzing variant: token counts capped so each
request stays fast, token ids and top_k bounded by the served model's
vocabulary, ``/update_weights_from_disk`` left out (it would load a
checkpoint), ``/pause_generation`` left out (it would stall every request
after it) and ``/start_profile``, ``/stop_profile`` left out (a recording may
last an hour, and writes files; tests/e2e/test_profile_on_demand.py checks them).

The budget, sized so the run cannot time out on a busy 2-core machine:

- requests: ``EXAMPLES`` (25) per generation operation and mode,
  ``CONTROL_EXAMPLES`` (50) per control operation and mode, sent one at a time
  and derandomized, so every run sends the same ones (``TERCET_FUZZ_EXAMPLES``
  raises it for a long run);
- one request's work: ``max_tokens``/``max_new_tokens``/``min_tokens`` at most
  ``FUZZ_MAX_TOKENS`` (64), ``n`` at most ``scheduler.max_running_requests``
  (8; more is refused with a 400), and at most ``FUZZ_CONTEXT_LEN`` (256)
  tokens of context. The context is what bounds a chat request that leaves
  ``max_tokens`` out, which runs to the end of the context: at the tiny
  model's own 1024 those took up to a minute each with ``n`` > 2 and made the
  chat case take three minutes and once time out. The worst request is now
  8 x 256 tokens, a few seconds;
- ``REQUEST_TIMEOUT`` (120 s) per request, far above that worst case;
  hypothesis's per-example deadline is off, since a loaded machine's latency
  is not a finding.
"""

from __future__ import annotations

import json
import os
import shutil

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection

from tercet.http.openapi import openapi_document as openapi
from tercet.testing import TINY_SETTINGS

FUZZ_MAX_TOKENS = 64
FUZZ_CONTEXT_LEN = 256


def fuzz_schema(vocab_size: int | None = None):
    document = openapi.build_document(
        max_tokens_limit=FUZZ_MAX_TOKENS,
        include_update_weights=False,
        exclude_paths=("/pause_generation", "/start_profile", "/stop_profile"),
        vocab_size=vocab_size,
    )
    return schemathesis.openapi.from_dict(document)


OPERATIONS = [result.ok() for result in fuzz_schema().get_all_operations()]
CONTROL_PATHS = frozenset({"/flush_cache", "/abort_request", "/get_server_info", "/continue_generation"})


def _cases(operations) -> list:
    # Valid requests for every operation; schema-breaking ones for those with a
    # body (an operation that takes no input has no way to be sent a wrong one).
    return [
        pytest.param(operation.label, mode, id=f"{operation.label}-{mode.value}")
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.POSITIVE or operation.body
    ]


# The protocols translated into chat completions: their valid coverage cases are sent too.
BRIDGED_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens", "/v1/responses"})


def _coverage_cases(operations) -> list:
    return [
        pytest.param(operation.label, mode, id=f"{operation.label}-coverage-{mode.value}")
        for operation in operations
        if operation.body
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.NEGATIVE or operation.path in BRIDGED_PATHS
    ]


COVERAGE_CASES = _coverage_cases(OPERATIONS)
CASES = _cases(operation for operation in OPERATIONS if operation.path not in CONTROL_PATHS)
CONTROL_CASES = _cases(operation for operation in OPERATIONS if operation.path in CONTROL_PATHS)
# Examples per operation and mode; TERCET_FUZZ_EXAMPLES raises it for a long, thorough run.
EXAMPLES = int(os.environ.get("TERCET_FUZZ_EXAMPLES", "25"))
# Control requests are cheap (no generation), so they get more.
CONTROL_EXAMPLES = 2 * EXAMPLES
REQUEST_TIMEOUT = 120


@pytest.fixture(scope="module")
def served_schema(tiny_llama_dir):
    """The fuzzing schema with the served model's vocabulary, as the server's own document has."""
    from transformers import AutoTokenizer

    return fuzz_schema(len(AutoTokenizer.from_pretrained(tiny_llama_dir)))


@pytest.fixture(scope="module")
def fuzz_model_dir(tiny_llama_dir, tmp_path_factory):
    """The tiny model with a ``FUZZ_CONTEXT_LEN``-token context (same weights and vocabulary)."""
    target = tmp_path_factory.mktemp("fuzz-model")
    shutil.copytree(tiny_llama_dir, target, dirs_exist_ok=True)
    config_path = target / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = FUZZ_CONTEXT_LEN
    config_path.write_text(json.dumps(config, indent=2))
    return target


@pytest.fixture(scope="module")
def fuzz_server(start_server, fuzz_model_dir):
    # With a pooling, /v1/embeddings answers what it is sent rather than refusing every request.
    server = start_server(fuzz_model_dir, [*TINY_SETTINGS, "model.pooling=mean"])
    # The budget rests on the context; check it holds rather than assume it.
    info = httpx.get(server.base_url + "/get_server_info", timeout=REQUEST_TIMEOUT).json()
    assert info["context_len"] == FUZZ_CONTEXT_LEN, info
    yield server
    # The point of the run: after everything the fuzzer sent, the server still serves.
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    generated = httpx.post(
        server.base_url + "/generate",
        json={"text": "Hello", "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
        timeout=REQUEST_TIMEOUT,
    )
    assert generated.status_code == 200, generated.text
    server.stop()


def _describe(case, response) -> str:
    return f"{response.status_code} for\n{case.as_curl_command()}\nresponse: {response.text[:2000]}"


def _fuzz(schema, base_url: str, label: str, mode: GenerationMode, examples: int, expect) -> None:
    """Send ``examples`` generated cases; ``expect(case, response)`` checks each answer."""
    operation = schema.find_operation_by_label(label)
    seen_statuses: set[int] = set()

    @settings(
        max_examples=examples,
        deadline=None,  # one request's latency is the server's, not hypothesis's business
        derandomize=True,  # the same requests every run, so a failure reproduces
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case):
        response = case.call(base_url=base_url, timeout=REQUEST_TIMEOUT)
        seen_statuses.add(response.status_code)
        assert response.status_code < 500, _describe(case, response)
        expect(case, response)

    check()
    assert seen_statuses, f"no request was sent for {label}"


def _is_answered(case, response) -> None:
    pass  # without a 5xx, which _fuzz checks for every case


def _is_served(case, response) -> None:
    assert 200 <= response.status_code < 300, _describe(case, response)


def _is_refused(case, response) -> None:
    # schemathesis's own check knows which of its mutations really break the
    # schema (a left-out optional body, say, does not).
    case.validate_response(response, checks=[negative_data_rejection])


@pytest.mark.parametrize("label, mode", CASES)
def test_no_request_gets_a_server_error(fuzz_server, served_schema, label, mode):
    expect = _is_answered if mode is GenerationMode.POSITIVE else _is_refused
    _fuzz(served_schema, fuzz_server.base_url, label, mode, EXAMPLES, expect)


@pytest.mark.parametrize("label, mode", CONTROL_CASES)
def test_control_routes_answer_as_the_document_says(fuzz_server, served_schema, label, mode):
    expect = _is_served if mode is GenerationMode.POSITIVE else _is_refused
    _fuzz(served_schema, fuzz_server.base_url, label, mode, CONTROL_EXAMPLES, expect)


@pytest.mark.parametrize("label, mode", COVERAGE_CASES)
def test_the_coverage_cases_get_no_server_error(fuzz_server, served_schema, label, mode):
    operation = served_schema.find_operation_by_label(label)
    config = served_schema.config.generation_for(operation=operation)
    expect = _is_answered if mode is GenerationMode.POSITIVE else _is_refused
    num_sent = 0
    for case in served_schema.iter_coverage_cases(operation, generation_modes=[mode], generation_config=config):
        response = case.call(base_url=fuzz_server.base_url, timeout=REQUEST_TIMEOUT)
        assert response.status_code < 500, _describe(case, response)
        expect(case, response)
        num_sent += 1
    assert num_sent, f"no coverage case was sent for {label}"
