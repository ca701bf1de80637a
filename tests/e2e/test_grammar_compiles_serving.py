"""Slow grammar compiles on a real server: they stall nobody, they end at their time limit, and a
constraint too large to compile is refused at the edge.

The pathological constraint is a JSON Schema of 10,000 optional properties: it
takes seconds of a core to compile (and then fails llguidance's parser limits).
Whether another user's small constrained request is held behind it is told by
order, not by a clock: the small one must be answered while the slow one is
still compiling.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

TIMEOUT = 300
SLOW_SCHEMA = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
# Large enough for the slow schema (about 290 KB), so it reaches the scheduler.
ROOMY = [*TINY_SETTINGS, "grammar.max_constraint_bytes=1000000"]


def generate(server, sampling_params: dict, timeout: float = TIMEOUT) -> httpx.Response:
    body = {"text": "Answer:", "sampling_params": {"temperature": 0, **sampling_params}}
    return httpx.post(server.base_url + "/generate", json=body, timeout=timeout)


def slow_request(server, schema: dict = SLOW_SCHEMA, timeout: float = TIMEOUT) -> httpx.Response:
    return generate(server, {"json_schema": json.dumps(schema), "max_new_tokens": 4}, timeout)


def slow_schema(name: str) -> dict:
    """Another slow schema (each compiles anew): 6,000 optional properties."""
    return {"type": "object", "properties": {f"{name}{i}": {"type": "string"} for i in range(6_000)}}


def in_flight(server) -> int:
    return sum(httpx.get(server.base_url + "/get_server_info", timeout=TIMEOUT).json()["requests_in_flight_per_rank"])


def wait_until_in_flight(server, count: int) -> None:
    """Until the API has sent exactly ``count`` requests to the scheduler (in order: one socket
    carries them, and an abort too)."""
    deadline = time.monotonic() + TIMEOUT
    while in_flight(server) != count:
        assert time.monotonic() < deadline, f"the API never held {count} requests"


@pytest.fixture(scope="module")
def patient(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, [*ROOMY, "grammar.compile_timeout=600"])


@pytest.fixture(scope="module")
def patient_tp2(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, [*ROOMY, "grammar.compile_timeout=600"], ["--tp-size", "2"])


@pytest.fixture(scope="module")
def impatient(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, [*ROOMY, "grammar.compile_timeout=1"])


@pytest.mark.parametrize("server_name", ["patient", "patient_tp2"], ids=["tp1", "tp2"])
def test_a_small_constrained_request_is_answered_while_a_slow_compile_runs(request, server_name):
    server = request.getfixturevalue(server_name)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(slow_request, server)
        wait_until_in_flight(server, 1)
        started = time.perf_counter()
        small = generate(server, {"regex": "(yes|no)", "max_new_tokens": 4})
        waited = time.perf_counter() - started
        assert small.status_code == 200, small.text
        assert small.json()["text"] in ("yes", "no")
        assert not slow.done(), "the small request was answered only after the slow compile"
        print(f"the small request took {waited:.3f} s beside a slow compile ({server_name})")
        # The slow schema itself ends as what it is: past the parser's limits.
        answer = slow.result()
    assert answer.status_code == 400 and "parser limits" in answer.text and "vocabulary" not in answer.text


def test_compiles_dropped_by_their_clients_hold_nobody(patient):
    # Three clients give up on their slow requests; their compiles cannot be stopped, only written off.
    with ThreadPoolExecutor(3) as pool:
        for name in "abc":
            pool.submit(slow_request, patient, slow_schema(name), 1)
    wait_until_in_flight(patient, 0)
    with ThreadPoolExecutor(1) as pool:
        # One more slow compile, after the dropped ones; the small request comes after it.
        sentinel = pool.submit(slow_request, patient, slow_schema("d"))
        wait_until_in_flight(patient, 1)
        small = generate(patient, {"regex": "(yes|no|maybe)", "max_new_tokens": 4})
        assert small.status_code == 200, small.text
        assert not sentinel.done(), "the small request waited for the compiles before it"
        assert sentinel.result().status_code == 400


def test_a_compile_past_its_time_limit_is_a_400_naming_the_limit(impatient):
    answer = slow_request(impatient)
    assert answer.status_code == 400, answer.text
    assert "grammar.compile_timeout (1 s)" in answer.json()["error"]["message"]
    # The abandoned compile holds no one: the next constrained request is served.
    small = generate(impatient, {"regex": "(yes|no)", "max_new_tokens": 4})
    assert small.status_code == 200 and small.json()["text"] in ("yes", "no")


def test_a_constraint_over_the_size_limit_is_refused_at_the_edge(tiny_server):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": SLOW_SCHEMA}}}
    answer = httpx.post(tiny_server.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "response_format" and "grammar.max_constraint_bytes" in error["message"]
