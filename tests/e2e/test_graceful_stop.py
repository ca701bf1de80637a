"""SIGTERM drains: new requests get 503 while those in flight finish (up to
server.shutdown_timeout), then the children stop in reverse start order and
the server exits 0.

Generation is paused while the signal arrives, so a request is certainly in
flight however fast the model is.
"""

from __future__ import annotations

import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tercet.testing import TINY_SETTINGS, RunningServer, num_waiting, wait_for_ranks

MAX_TOKENS = 24


def completion(base_url: str, stream: bool) -> dict:
    """POST a greedy completion; for a stream, the joined text and the last chunk's fields."""
    body = {"model": "tiny", "prompt": "Count", "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
            "stream": stream}
    with httpx.Client(base_url=base_url, timeout=120) as client:
        if not stream:
            response = client.post("/v1/completions", json=body)
            return {"status": response.status_code, "json": response.json()}
        text, finish_reason = [], None
        with client.stream("POST", "/v1/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choice = json.loads(line[len("data: "):])["choices"][0]
                    text.append(choice["text"])
                    finish_reason = choice["finish_reason"] or finish_reason
            return {"status": response.status_code, "text": "".join(text), "finish_reason": finish_reason}


def start(tmp_path, tiny_llama_dir, shutdown_timeout: float) -> RunningServer:
    settings = TINY_SETTINGS + [f"server.shutdown_timeout={shutdown_timeout}", "model.served_model_name=tiny"]
    return RunningServer(tiny_llama_dir, tmp_path / "server.log", settings).wait_until_healthy()


def pause_with_one_request_in_flight(server: RunningServer, pool: ThreadPoolExecutor, stream: bool):
    assert httpx.post(server.base_url + "/pause_generation", timeout=30).json()["is_paused"] is True
    in_flight = pool.submit(completion, server.base_url, stream)
    wait_for_ranks(server.base_url, lambda ranks: num_waiting(ranks) == 1)
    return in_flight


def test_sigterm_refuses_new_work_and_lets_requests_in_flight_finish(tmp_path, tiny_llama_dir):
    server = start(tmp_path, tiny_llama_dir, shutdown_timeout=60)
    try:
        with ThreadPoolExecutor(2) as pool:
            streamed = pause_with_one_request_in_flight(server, pool, stream=True)
            whole = pool.submit(completion, server.base_url, False)
            wait_for_ranks(server.base_url, lambda ranks: num_waiting(ranks) == 2)
            server.process.send_signal(signal.SIGTERM)

            deadline = time.monotonic() + 10
            while (health := httpx.get(server.base_url + "/health", timeout=10)).status_code == 200:
                assert time.monotonic() < deadline, "the server never started draining"
                time.sleep(0.05)
            assert health.status_code == 503 and "shutting down" in health.json()["reason"]
            refused = httpx.post(server.base_url + "/v1/completions", timeout=30,
                                 json={"model": "tiny", "prompt": "Hi", "max_tokens": 1})
            assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
            assert refused.headers["Retry-After"] == "1"

            # The requests in flight still finish normally once generation resumes.
            assert httpx.post(server.base_url + "/continue_generation", timeout=30).status_code == 200
            streamed, whole = streamed.result(timeout=60), whole.result(timeout=60)
        assert streamed["status"] == 200 and streamed["finish_reason"] == "length"
        assert whole["status"] == 200
        assert whole["json"]["usage"]["completion_tokens"] == MAX_TOKENS
        assert whole["json"]["choices"][0]["text"] == streamed["text"]  # greedy: the same text either way
        assert server.process.wait(timeout=30) == 0
    finally:
        server.stop()
    log = server.log()
    stops = re.findall(r"stopping (detokenizer|scheduler) \(pid", log)
    assert stops == ["detokenizer", "scheduler"], log


def test_requests_still_running_at_shutdown_timeout_are_ended_with_503(tmp_path, tiny_llama_dir):
    server = start(tmp_path, tiny_llama_dir, shutdown_timeout=1)
    try:
        with ThreadPoolExecutor(1) as pool:
            stuck = pause_with_one_request_in_flight(server, pool, stream=False)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            ended = stuck.result(timeout=30)
            assert server.process.wait(timeout=30) == 0
            took = time.monotonic() - signalled
    finally:
        server.stop()
    assert ended["status"] == 503
    assert "server.shutdown_timeout = 1 s" in ended["json"]["error"]["message"]
    # Not a timing test: the bound only shows the stuck request did not hold the exit
    # (a busy 2-core machine has taken 7 s to stop the children; the figure is printed).
    assert 1 <= took < 20, f"exit took {took:.1f} s after SIGTERM with shutdown_timeout = 1 s"
    print(f"\nexit {took:.2f} s after SIGTERM (shutdown_timeout = 1 s)")
