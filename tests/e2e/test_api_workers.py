"""Two API workers behind one port: one server to the outside.

Every request here opens a connection of its own, so the kernel spreads them
over both workers (SO_REUSEPORT); ``tercet:api_worker_requests_total`` shows
how many each worker's process sent, and that both took part.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from tercet.testing import TINY_SETTINGS, RunningServer, num_running, num_waiting, wait_for_ranks, write_plugin_folder

WORKERS = ["server.api_workers=2", "model.served_model_name=tiny"]
# No prefix cache: with nothing running, no KV page is held.
SETTINGS = TINY_SETTINGS + WORKERS + ["scheduler.dp_size=2", "cache.prefix_cache=false"]
TIMEOUT = 120
# Enough fresh connections that both workers get some: each lands on either, 50:50.
MAX_TRIES = 60


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, SETTINGS)


def metric_lines(server) -> list[str]:
    text = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT).text
    return [line for line in text.splitlines() if not line.startswith("#")]


def per_worker(lines: list[str]) -> dict[str, float]:
    counts = {}
    for line in lines:
        match = re.match(r'tercet:api_worker_requests_total\{api_worker="(\d+)".*\} (\S+)', line)
        if match:
            counts[match.group(1)] = float(match.group(2))
    return counts


def total(lines: list[str], name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))


def sent_by_each(server, before: dict[str, float]) -> dict[str, float]:
    after = per_worker(metric_lines(server))
    return {worker: after.get(worker, 0) - before.get(worker, 0) for worker in ("1", "2")}


def until_both_workers_sent(server, send_one) -> list:
    """Call ``send_one(count)`` (count: the calls so far, this one included) until each worker
    has sent a request to the ranks; what the calls returned."""
    before = per_worker(metric_lines(server))
    results = []
    for count in range(1, MAX_TRIES + 1):
        results.append(send_one(count))
        sent = sent_by_each(server, before)
        if sent["1"] and sent["2"]:
            return results
    raise AssertionError(f"{MAX_TRIES} connections and a worker got none: {sent}")


def generate(base_url: str, text: str = "Count", max_new_tokens: int = 2, **fields) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
            **fields}
    response = httpx.post(base_url + "/generate", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def kv_used(ranks) -> int:
    return sum(rank["kv_used_tokens"] for rank in ranks)


def is_idle(ranks) -> bool:
    return num_running(ranks) == 0 and num_waiting(ranks) == 0 and kv_used(ranks) == 0


def test_requests_spread_over_both_workers_and_metrics_count_every_one(server):
    wait_for_ranks(server.base_url, is_idle)
    lines = metric_lines(server)
    before, finished_before = per_worker(lines), total(lines, "tercet:request_success_total")
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda index: generate(server.base_url), range(40)))
    assert {output["meta_info"]["finish_reason"]["type"] for output in outputs} == {"length"}
    sent = sent_by_each(server, before)
    assert sent["1"] > 0 and sent["2"] > 0, sent
    assert sum(sent.values()) == 40
    # Whichever worker a scrape reaches, it shows the whole server's figures.
    scrapes = [metric_lines(server) for _ in range(8)]
    assert {total(lines, "tercet:request_success_total") - finished_before for lines in scrapes} == {40}
    assert {total(lines, "tercet:generation_tokens_total") for lines in scrapes} == {total(scrapes[0], "tercet:generation_tokens_total")}
    # The ranks' gauges appear once per rank, not once per worker.
    assert len([line for line in scrapes[0] if line.startswith("tercet:num_requests_running{")]) == 2


async def stream_text(client: httpx.AsyncClient, prompt: str) -> str:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": True}
    pieces = []
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces.append(json.loads(line[len("data: "):])["choices"][0]["text"])
    return "".join(pieces)


def test_200_concurrent_streams_complete_with_one_workers_greedy_outputs(server, tiny_server):
    prompts = [f"Story {index}:" for index in range(10)]
    reference = {}
    for prompt in prompts:  # the session's one-worker server
        body = {"model": httpx.get(tiny_server.base_url + "/v1/models").json()["data"][0]["id"], "prompt": prompt,
                "max_tokens": 6, "temperature": 0, "ignore_eos": True}
        reference[prompt] = httpx.post(tiny_server.base_url + "/v1/completions", json=body, timeout=TIMEOUT).json()["choices"][0]["text"]

    async def all_streams():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300, limits=limits) as client:
            return await asyncio.gather(*(stream_text(client, prompts[index % 10]) for index in range(200)))

    before = per_worker(metric_lines(server))
    texts = asyncio.run(all_streams())
    assert [text for text in texts] == [reference[prompts[index % 10]] for index in range(200)]
    sent = sent_by_each(server, before)
    assert sent["1"] > 0 and sent["2"] > 0 and sum(sent.values()) == 200, sent


def test_clients_leaving_on_both_workers_free_the_kv(server):
    wait_for_ranks(server.base_url, is_idle)
    body = {"text": "Count", "stream": True, "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}
    clients, streams, readers = [], [], []

    def open_stream(count: int) -> None:
        client = httpx.Client(base_url=server.base_url, timeout=TIMEOUT)
        clients.append(client)
        stream = client.stream("POST", "/generate", json=body)
        response = stream.__enter__()
        streams.append(stream)
        # Kept: a reader dropped would close its stream.
        readers.append(response.iter_raw())
        assert next(readers[-1]).startswith(b"data: ")

    try:
        until_both_workers_sent(server, open_stream)
        assert kv_used(wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) >= 2)) > 0
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
        for client in clients:
            client.close()
    wait_for_ranks(server.base_url, is_idle, timeout=30)


def test_control_requests_reach_every_rank_and_pause_holds_every_workers_requests(server):
    info = httpx.get(server.base_url + "/get_server_info", timeout=TIMEOUT).json()
    assert len(info["ranks"]) == 2
    assert [worker["worker"] for worker in info["api_workers"]] == [1, 2]
    assert all(psutil.Process(worker["pid"]).name() for worker in info["api_workers"])
    flushed = httpx.post(server.base_url + "/flush_cache", json={"timeout": 30}, timeout=TIMEOUT).json()
    assert flushed["ok"] and len(flushed["ranks"]) == 2
    assert httpx.post(server.base_url + "/pause_generation", timeout=TIMEOUT).json()["is_paused"]
    with ThreadPoolExecutor(MAX_TRIES) as pool:
        try:
            waiting = until_both_workers_sent(server, lambda count: waiting_request(server, pool, count))
            # Both workers' requests wait: the pause reached every rank.
            assert not any(future.done() for future in waiting)
        finally:
            assert not httpx.post(server.base_url + "/continue_generation", timeout=TIMEOUT).json()["is_paused"]
        assert all(future.result()["meta_info"]["finish_reason"]["type"] == "length" for future in waiting)


def waiting_request(server, pool: ThreadPoolExecutor, count: int, **fields):
    """A request sent while generation is paused, once it waits (the ``count``-th waiting)."""
    future = pool.submit(generate, server.base_url, **fields)
    wait_for_ranks(server.base_url, lambda ranks: num_waiting(ranks) == count)
    return future


def test_abort_request_reaches_a_request_held_by_either_worker(server):
    body = {"text": "Count", "stream": True, "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}

    def run(rid: str) -> str:
        with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as client:
            with client.stream("POST", "/generate", json={**body, "rid": rid}) as response:
                lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        return json.loads(lines[-1][len("data: "):])["meta_info"]["finish_reason"]["type"]

    rids = [f"abort-me-{index}" for index in range(6)]
    with ThreadPoolExecutor(len(rids)) as pool:
        ends = [pool.submit(run, rid) for rid in rids]
        wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) + num_waiting(ranks) == len(rids))
        # Each abort comes on a connection of its own: to the request's worker or to the other.
        for rid in rids:
            reply = httpx.post(server.base_url + "/abort_request", json={"rid": rid}, timeout=TIMEOUT).json()
            assert reply["aborted"], (rid, reply)
        assert [end.result() for end in ends] == ["abort"] * len(rids)
    wait_for_ranks(server.base_url, is_idle, timeout=30)


def test_tool_calls_through_every_worker(server):
    body = {
        "model": "tiny", "max_tokens": 60, "temperature": 0,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"],
            "additionalProperties": False}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }

    def call_tool(count: int) -> None:
        reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT).json()
        call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] in ("Paris", "Rome")

    until_both_workers_sent(server, call_tool)


def test_embeddings_through_every_worker(start_server, minilm_dir):
    server = start_server(minilm_dir, TINY_SETTINGS + ["server.api_workers=2"])

    def embed(count: int) -> list:
        body = {"model": "all-MiniLM-L6-v2", "input": ["a cat", "a dog"]}
        reply = httpx.post(server.base_url + "/v1/embeddings", json=body, timeout=TIMEOUT)
        assert reply.status_code == 200, reply.text
        return [item["embedding"] for item in reply.json()["data"]]

    vectors = until_both_workers_sent(server, embed)
    assert all(pair == vectors[0] for pair in vectors)


def worker_ready_pid(server, number: int) -> int:
    # /health answers once one worker listens: wait for this one's line in the log.
    ready = eventually(lambda: re.search(rf"api worker {number} is ready \(pid (\d+)\)", server.log()),
                       lambda match: match is not None)
    return int(ready.group(1))


def still_running(pids: list[int]) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_killing_one_worker_ends_the_server_within_5_s_with_no_process_left(tmp_path, tiny_llama_dir):
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS + WORKERS).wait_until_healthy()
    children = [child.pid for child in server.child_processes()]
    worker_pid = worker_ready_pid(server, 2)
    killed = time.monotonic()
    psutil.Process(worker_pid).send_signal(signal.SIGKILL)
    try:
        server.process.wait(timeout=30)
        took = time.monotonic() - killed
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert "api worker 2 process died (killed by signal SIGKILL)" in server.log()
    assert took < 5, f"the server took {took:.1f} s to exit after an API worker died"
    assert eventually(lambda: still_running(children), lambda left: left == [], timeout=5) == []


# A plugin module that widens, in every process of the server, the window in which a thread
# that reaps a child holds its exit status before recording it, and lets the supervisor's
# watch thread come second: two threads reaping one worker then race as on a busy machine.
SLOW_REAPING = """
import os, threading, time

_waitpid = os.waitpid


def waitpid(pid, options):
    if threading.current_thread().name == "tercet-child-watch":
        time.sleep(0.3)
    reaped = _waitpid(pid, options)
    if reaped[0]:
        time.sleep(0.6)
    return reaped


os.waitpid = waitpid
"""


def test_a_dead_workers_exit_is_named_even_when_another_thread_could_reap_it_first(tmp_path, tiny_llama_dir):
    folder = write_plugin_folder(tmp_path / "plugins", {"slow_reaping": "slow_reaping"}, {"slow_reaping": SLOW_REAPING})
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS + WORKERS,
                           env={"PYTHONPATH": str(folder)}).wait_until_healthy()
    psutil.Process(worker_ready_pid(server, 2)).send_signal(signal.SIGKILL)
    try:
        server.process.wait(timeout=TIMEOUT)
    finally:
        server.stop()
    # Reaped by the group's wait first, it was reported "still running".
    assert "api worker 2 process died (killed by signal SIGKILL)" in server.log(), server.log()


def test_sigterm_drains_every_worker(tmp_path, tiny_llama_dir):
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS + WORKERS).wait_until_healthy()
    try:
        assert httpx.post(server.base_url + "/pause_generation", timeout=TIMEOUT).json()["is_paused"]
        with ThreadPoolExecutor(MAX_TRIES) as pool:
            in_flight = until_both_workers_sent(
                server, lambda count: waiting_request(server, pool, count, max_new_tokens=4))
            server.process.send_signal(signal.SIGTERM)
            # Draining, each worker refuses new work; the paused requests may still finish.
            eventually(lambda: httpx.get(server.base_url + "/health", timeout=TIMEOUT),
                       lambda response: response.status_code == 503)
            httpx.post(server.base_url + "/continue_generation", timeout=TIMEOUT)
            finished = [future.result()["meta_info"]["finish_reason"]["type"] for future in in_flight]
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    assert finished == ["length"] * len(in_flight)


def test_a_worker_that_cannot_start_is_named(tmp_path, tiny_llama_dir):
    # The route registers in every process; its handler module is imported only where the app is
    # built, in the API workers, and fails there.
    source = (
        "from tercet.plugin_api import hookimpl\n\n"
        "@hookimpl\n"
        "def register_http_routes(register):\n"
        "    register('/boom', 'failing_handler:endpoint', ['GET'])\n"
    )
    folder = write_plugin_folder(tmp_path / "plugins", {"routes_that_fail": "routes_that_fail"},
                                 {"routes_that_fail": source,
                                  "failing_handler": "raise RuntimeError('these routes cannot be built')\n"})
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS + WORKERS,
                           env={"PYTHONPATH": str(folder)})
    try:
        server.process.wait(timeout=TIMEOUT)
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert re.search(r"api worker [12] process failed: .*these routes cannot be built", server.log()), server.log()


def eventually(get, holds, timeout: float = 60):
    """``get()`` again until ``holds(value)``; the value then (an AssertionError at the timeout)."""
    deadline = time.monotonic() + timeout
    value = get()
    while not holds(value):
        assert time.monotonic() < deadline, f"never held; last: {str(value)[:2000]}"
        value = get()
    return value


def test_with_on_child_failure_unhealthy_a_dead_worker_leaves_503s_and_frees_its_requests_kv(tmp_path, tiny_llama_dir):
    settings = TINY_SETTINGS + WORKERS + ["server.on_child_failure=unhealthy", "cache.prefix_cache=false"]
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", settings).wait_until_healthy()
    body = {"text": "Count", "stream": True, "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}
    clients, readers = [], []

    def open_stream(count: int) -> None:
        client = httpx.Client(base_url=server.base_url, timeout=TIMEOUT)
        clients.append(client)
        stream = client.stream("POST", "/generate", json=body)
        # Both kept: either dropped would close the stream.
        readers.append((stream, stream.__enter__().iter_raw()))
        assert next(readers[-1][1]).startswith(b"data: ")

    try:
        until_both_workers_sent(server, open_stream)
        # Paused, no request can finish by itself: only an abort frees its KV.
        assert httpx.post(server.base_url + "/pause_generation", timeout=TIMEOUT).json()["is_paused"]
        worker_pid = worker_ready_pid(server, 2)
        psutil.Process(worker_pid).send_signal(signal.SIGKILL)
        health = eventually(lambda: httpx.get(server.base_url + "/health", timeout=TIMEOUT),
                            lambda response: response.status_code == 503)
        assert "api worker 2 process died (killed by signal SIGKILL)" in health.json()["reason"]
        # Every request on the ranks was aborted, the dead worker's too: no KV is held.
        eventually(lambda: metric_lines(server), lambda lines: total(lines, "tercet:num_requests_running") == 0
                   and total(lines, "tercet:num_requests_waiting") == 0 and total(lines, "tercet:kv_cache_usage_perc") == 0,
                   timeout=30)
        assert server.process.poll() is None
    finally:
        for client in clients:
            client.close()
        returncode = server.stop()
    assert returncode != 0
