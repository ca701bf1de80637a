"""No body makes a route answer 5xx: a property test over each route's request schema, in process.

Each route that takes a body gets bodies drawn from its schema in the OpenAPI
document (:mod:`loose_bodies`): well formed, and for each place of the schema,
in turn, well formed but for that place, which holds a value of another type.
They are sent to the app on the stand-in manager. Whatever the body, the answer is a
2xx or a 4xx, never a 5xx: every field is checked before it is used. The
end-to-end fuzz run (tests/e2e/test_openapi_fuzz.py) sends schemathesis's
cases to a real server; this one is cheap enough to send many more, deeper.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from http_stand_in import StandInTokenizerManager
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loose_bodies import Schemas, broken_at, places, shaped
from starlette.testclient import TestClient

from tercet.http.openapi import openapi_document as openapi
from tercet.http.server.app import create_app

DOCUMENT = openapi.build_document(vocab_size=StandInTokenizerManager.vocab_size)
SCHEMAS = Schemas(DOCUMENT["components"]["schemas"])
# The routes that read a body, and the schema of each (control routes too: the stand-in acts on nothing).
ROUTES = {
    path: operation["requestBody"]["content"]["application/json"]["schema"]
    for path, item in DOCUMENT["paths"].items()
    for operation in item.values()
    if isinstance(operation, dict) and "requestBody" in operation
}


def with_path_parameters(path: str) -> str:
    """``path`` with each ``{parameter}`` filled in (``/sessions/{name}/save``: a session named "example")."""
    return re.sub(r"\{\w+\}", "example", path)


# Bodies per place of a schema, and well-formed ones per route; TERCET_PROPERTY_EXAMPLES raises it for a long run.
EXAMPLES = int(os.environ.get("TERCET_PROPERTY_EXAMPLES", "8"))


def test_every_generation_route_is_covered():
    assert {"/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/chat/completions",
            "/v1/completions", "/generate", "/v1/embeddings"} <= set(ROUTES)


@pytest.fixture(scope="module")
def client():
    app = create_app(StandInTokenizerManager(answers_logprobs=True))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        yield client


def _answers_every(client, path: str, bodies: st.SearchStrategy, examples: int) -> set[int]:
    """The statuses of ``examples`` bodies sent to ``path``, none of them a 5xx."""
    statuses = set()

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=bodies)
    def check(body):
        # Sent as JSON text: json.dumps escapes a lone surrogate, as a client's JSON would carry one.
        response = client.post(with_path_parameters(path), content=json.dumps(body), headers={"content-type": "application/json"})
        statuses.add(response.status_code)
        assert response.status_code < 500, f"{response.status_code} for {json.dumps(body)}: {response.text[:500]}"

    check()
    return statuses


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_no_body_gets_a_server_error(client, path):
    schema = ROUTES[path]
    statuses = _answers_every(client, path, shaped(SCHEMAS, schema), 4 * EXAMPLES)
    # Some well-formed bodies are served: the bodies reach the handler (none is refused before it).
    assert any(200 <= status < 300 for status in statuses), statuses
    # Every place, each in turn: drawn at random, the deep ones would be reached seldom.
    for place in places(SCHEMAS, schema)[1:]:  # the body itself stays an object
        _answers_every(client, path, broken_at(SCHEMAS, schema, place), EXAMPLES)
