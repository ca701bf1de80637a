"""Fuzz a real server with schemathesis, driven by tercet's own OpenAPI document.

Every operation gets bodies generated from its schema (valid ones and, in the
coverage phase, invalid ones at and past the documented edges). However odd the
request, the server must answer it without a 5xx and keep serving afterwards.

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
from hypothesis import HealthCheck, settings
from running_server import TINY_SETTINGS
from tercet.http import openapi

pytestmark = pytest.mark.e2e

FUZZ_MAX_TOKENS = 64
FUZZ_DOCUMENT = openapi.build_document(
    max_tokens_limit=FUZZ_MAX_TOKENS,
    include_update_weights=False,
    exclude_paths=("/pause_generation",),
)
REQUEST_TIMEOUT = 60


@pytest.fixture(scope="module")
def fuzz_server(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + ["cache.max_total_tokens=4096"])
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


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_server):
    schema = schemathesis.openapi.from_dict(FUZZ_DOCUMENT)
    schema.config.update(base_url=fuzz_server.base_url)
    # The coverage phase sends every edge case the schema implies (hundreds per
    # operation, max_examples does not bound it); the fuzzing phase's bounded
    # sample keeps this test well under two minutes.
    # TERCET_FUZZ_COVERAGE=1 turns it on for a long, thorough run.
    schema.config.phases.coverage.enabled = os.environ.get("TERCET_FUZZ_COVERAGE") == "1"
    return schema


schema = schemathesis.pytest.from_fixture("fuzz_schema")


def _describe(case, response) -> str:
    return f"{response.status_code} for\n{case.as_curl_command()}\nresponse: {response.text[:2000]}"


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,  # one request's latency is the server's, not hypothesis's business
    derandomize=True,  # the same requests every run, so a failure reproduces
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_request_gets_a_server_error(case, fuzz_server):
    response = case.call(timeout=REQUEST_TIMEOUT)
    assert response.status_code < 500, _describe(case, response)
