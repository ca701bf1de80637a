"""POST /start_profile and /stop_profile on a real server of two ranks: one Chrome trace per rank,
written while the server keeps serving; the output path checked; the API key required; and
``tercet profile`` driving it from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

API_KEY = "profile-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def profile_root(tmp_path_factory):
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir, profile_root):
    return start_server(tiny_llama_dir, TINY_SETTINGS + [
        "scheduler.dp_size=2", f"server.api_key={API_KEY}", f"server.profile_dir={profile_root}",
    ])


def post(server, path, body=None, headers=AUTH, timeout=120):
    return httpx.post(server.base_url + path, json=body, headers=headers, timeout=timeout)


def generate(server, max_new_tokens=16):
    body = {"text": "Count to ten", "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                                        "ignore_eos": True}}
    response = post(server, "/generate", body)
    assert response.status_code == 200, response.text
    return response.json()


def recorded_operators(path: str) -> list[str]:
    with open(path) as trace:
        events = json.load(trace)["traceEvents"]
    return [event["name"] for event in events if str(event.get("name")).startswith("aten::")]


def wait_until_made(directory, profiling: threading.Thread, answer: dict) -> None:
    deadline = time.monotonic() + 60
    while not directory.exists():
        assert profiling.is_alive() and time.monotonic() < deadline, answer
        time.sleep(0.005)  # a poll interval, not a wait for something to happen


def in_background(call) -> tuple[threading.Thread, dict]:
    result = {}
    thread = threading.Thread(target=lambda: result.update(response=call()))
    thread.start()
    return thread, result


def test_profiling_needs_the_api_key(server, profile_root):
    for path in ("/start_profile", "/stop_profile"):
        assert post(server, path, {"seconds": 1}, headers={}).status_code == 401
    assert os.listdir(profile_root) == []


@pytest.mark.parametrize("output_dir", ["../escape", "/tmp/escape", "a/../../escape", "link-out"])
def test_an_output_path_leading_elsewhere_is_a_400_and_nothing_is_written(server, profile_root, tmp_path,
                                                                          output_dir):
    outside = tmp_path / "outside"
    outside.mkdir()
    link = profile_root / "link-out"
    if not link.is_symlink():
        link.symlink_to(outside)
    before = sorted(os.listdir(profile_root))
    response = post(server, "/start_profile", {"output_dir": output_dir, "seconds": 1})
    assert response.status_code == 400, response.text
    assert "output_dir" in response.json()["error"]["message"]
    assert sorted(os.listdir(profile_root)) == before and os.listdir(outside) == []
    # Nothing started either.
    assert post(server, "/stop_profile").status_code == 409


def test_a_timed_profile_writes_a_trace_per_rank_while_requests_are_served(server, profile_root):
    target = profile_root / "timed"
    profiling, answer = in_background(lambda: post(server, "/start_profile", {"output_dir": "timed", "seconds": 3}))
    # The directory is made just before the ranks are told to start; a request sent after it
    # reaches its rank after the start (one socket from the API process to each rank, in order).
    wait_until_made(target, profiling, answer)
    served = generate(server)
    assert served["meta_info"]["completion_tokens"] == 16
    assert profiling.is_alive(), "the generation finished while the profile was still recording"
    profiling.join()
    response = answer["response"]
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output_dir"] == str(target) and body["num_ranks"] == 2
    assert sorted(trace["path"] for trace in body["traces"]) == [str(target / "dp0.trace.json"),
                                                                 str(target / "dp1.trace.json")]
    served_by = [trace for trace in body["traces"] if trace["num_steps"] > 0]
    assert len(served_by) == 1 and recorded_operators(served_by[0]["path"]), body


def test_an_open_profile_runs_until_stopped(server, profile_root):
    started = post(server, "/start_profile", {"output_dir": "open/ended", "activities": ["CPU"]})
    assert started.status_code == 200 and started.json()["recording"], started.text
    assert post(server, "/start_profile", {"output_dir": "other"}).status_code == 409
    generate(server)
    generate(server)
    stopped = post(server, "/stop_profile")
    assert stopped.status_code == 200, stopped.text
    traces = stopped.json()["traces"]
    assert len(traces) == 2 and all(os.path.isfile(trace["path"]) for trace in traces)
    assert all(trace["num_steps"] > 0 for trace in traces)  # round robin: each rank served one
    assert not (profile_root / "other").exists() or os.listdir(profile_root / "other") == []
    assert post(server, "/stop_profile").status_code == 409


def test_a_profile_of_num_steps_answers_once_every_rank_stepped_that_many(server, profile_root):
    profiling, answer = in_background(lambda: post(server, "/start_profile", {"output_dir": "steps", "num_steps": 3}))
    wait_until_made(profile_root / "steps", profiling, answer)
    generate(server)
    generate(server)
    profiling.join()
    response = answer["response"]
    assert response.status_code == 200, response.text
    assert [trace["num_steps"] for trace in response.json()["traces"]] == [3, 3]


def test_tercet_profile_records_from_the_command_line(server, profile_root):
    command = [sys.executable, "-m", "tercet", "profile", "--base-url", server.base_url, "--seconds", "0.5",
               "--output-dir", "from-cli"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TERCET_API_KEY": API_KEY})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["rank 0", "rank 1"]
    assert all(os.path.isfile(profile_root / "from-cli" / f"dp{rank}.trace.json") for rank in (0, 1))
    refused = subprocess.run(command[:-1] + ["../up"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "TERCET_API_KEY": API_KEY})
    assert refused.returncode == 1 and "(400)" in refused.stderr and "'..'" in refused.stderr
