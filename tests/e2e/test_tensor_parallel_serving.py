"""Tensor parallelism served: tp_size=2 answers as tp_size=1 does, dp=2 x tp=2 runs four workers,
each process names its role and ranks, and a TP worker that dies stops the server."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from tercet.testing import TINY_SETTINGS, RunningServer

TIMEOUT = 120
FLOAT32 = [*TINY_SETTINGS, "model.dtype=float32"]
PROMPTS = ["Hello, my name is", "The capital of France is", "1, 2, 3,", "Once upon a time"]


def greedy(server, prompt: str) -> list[int]:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}}
    return httpx.post(server.base_url + "/generate", json=body, timeout=TIMEOUT).json()["output_ids"]


def all_greedy(server) -> list[list[int]]:
    # Sent together, so the steps batch them as they would any traffic.
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda prompt: greedy(server, prompt), PROMPTS))


def title_of(process) -> str:
    # setproctitle pads the title to the length of the original command line.
    return " ".join(" ".join(process.cmdline()).split())


def titles(server) -> list[str]:
    return sorted(title_of(child) for child in server.child_processes())


@pytest.fixture(scope="module")
def single(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, FLOAT32)


@pytest.fixture(scope="module")
def tp2(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, FLOAT32, ["--tp-size", "2"])


def test_tp2_greedy_equals_tp1_token_for_token(single, tp2):
    expected = all_greedy(single)
    assert all(len(tokens) == 12 for tokens in expected)
    assert all_greedy(tp2) == expected
    # Sampled output agrees too: every rank draws from the same gathered logits with the same seed.
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 1.0, "seed": 7}
    answers = [httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT).json()
               for server in (single, tp2)]
    assert answers[0]["choices"][0]["message"] == answers[1]["choices"][0]["message"]


def test_each_process_names_its_role_and_ranks(tp2):
    shown = titles(tp2)
    assert "tercet scheduler dp0 tp0" in shown and "tercet scheduler dp0 tp1" in shown
    assert "tercet detokenizer" in shown


def test_control_requests_reach_the_group(tp2):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 6, "response_format": {"type": "json_object"}}
    answer = httpx.post(tp2.base_url + "/v1/chat/completions", json=body, timeout=TIMEOUT).json()
    assert answer["choices"][0]["message"]["content"].startswith("{")
    assert httpx.post(tp2.base_url + "/flush_cache", timeout=TIMEOUT).json()["ok"]
    ranks = httpx.get(tp2.base_url + "/get_server_info", timeout=TIMEOUT).json()["ranks"]
    assert len(ranks) == 1 and ranks[0]["prefix_cache_tokens"] == 0
    # Paused, every rank holds still; continued, they all step again.
    assert httpx.post(tp2.base_url + "/pause_generation", timeout=TIMEOUT).status_code == 200
    assert httpx.post(tp2.base_url + "/continue_generation", timeout=TIMEOUT).status_code == 200
    assert len(greedy(tp2, "after a pause")) == 12


def test_dp2_by_tp2_runs_four_workers(start_server, tiny_llama_dir, single):
    server = start_server(tiny_llama_dir, FLOAT32, ["--tp-size", "2", "--dp-size", "2"])
    shown = titles(server)
    assert [title for title in shown if title.startswith("tercet scheduler")] == [
        "tercet scheduler dp0 tp0", "tercet scheduler dp0 tp1", "tercet scheduler dp1 tp0", "tercet scheduler dp1 tp1"
    ]
    # Round robin spreads the prompts over both ranks; each answers as one process would.
    assert all_greedy(server) == all_greedy(single)
    ranks = httpx.get(server.base_url + "/get_server_info", timeout=TIMEOUT).json()["ranks"]
    assert [rank["rank"] for rank in ranks] == [0, 1]
    assert [reply["freed_tokens"] >= 0 for reply in httpx.post(server.base_url + "/flush_cache", timeout=TIMEOUT)
            .json()["ranks"]] == [True, True]


def test_a_tp_worker_killed_stops_the_server(tmp_path, tiny_llama_dir):
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", FLOAT32, ["--tp-size", "2"]).wait_until_healthy()
    children = server.child_processes()
    peer = next(child for child in children if title_of(child) == "tercet scheduler dp0 tp1")
    killed = time.monotonic()
    os.kill(peer.pid, signal.SIGKILL)
    try:
        server.process.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert "scheduler-tp1 process died (killed by signal SIGKILL)" in server.log()
    assert took < 5, f"the server took {took:.1f} s to exit after a TP worker died"
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not [child for child in alive if child.status() != psutil.STATUS_ZOMBIE], "a process outlived the server"
