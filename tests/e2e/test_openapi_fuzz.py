"""Fuzz a real server with schemathesis, driven by tercet's own OpenAPI document.

Every operation gets requests generated from its schema: valid ones
(positive) and ones that break it (negative: wrong types, missing fields,
values past the documented limits). However odd the request, the server must
answer it without a 5xx and keep serving afterwards.

schemathesis only generates the cases here (plain hypothesis drives them), so
the test does not depend on schemathesis's pytest integration, which lags
behind new pytest releases.

The schema is the document's fuzzing variant: token counts capped so each
request stays fast, ``/update_weights_from_disk`` left out (it would load a
checkpoint) and ``/pause_generation`` left out (it would stall every request
after it).
"""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from running_server import TINY_SETTINGS
from schemathesis import GenerationMode
from tercet.http import openapi

pytestmark = pytest.mark.e2e

FUZZ_MAX_TOKENS = 64
FUZZ_SCHEMA = schemathesis.openapi.from_dict(
    openapi.build_document(
        max_tokens_limit=FUZZ_MAX_TOKENS,
        include_update_weights=False,
        exclude_paths=("/pause_generation",),
    )
)
OPERATIONS = [result.ok() for result in FUZZ_SCHEMA.get_all_operations()]
# Valid requests for every operation; schema-breaking ones for those with a
# body (an operation that takes no input has no way to be sent a wrong one).
CASES = [
    pytest.param(operation.label, mode, id=f"{operation.label}-{mode.value}")
    for operation in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or operation.body
]
# Examples per operation and mode; TERCET_FUZZ_EXAMPLES raises it for a long, thorough run.
EXAMPLES = int(os.environ.get("TERCET_FUZZ_EXAMPLES", "25"))
REQUEST_TIMEOUT = 60


@pytest.fixture(scope="module")
def fuzz_server(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS)
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


@pytest.mark.parametrize("label, mode", CASES)
def test_no_request_gets_a_server_error(fuzz_server, label, mode):
    operation = FUZZ_SCHEMA.find_operation_by_label(label)
    seen_statuses: set[int] = set()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,  # one request's latency is the server's, not hypothesis's business
        derandomize=True,  # the same requests every run, so a failure reproduces
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case):
        response = case.call(base_url=fuzz_server.base_url, timeout=REQUEST_TIMEOUT)
        seen_statuses.add(response.status_code)
        assert response.status_code < 500, _describe(case, response)

    check()
    assert seen_statuses, f"no request was sent for {label}"
