"""Every control endpoint, with one and two data-parallel ranks, over ipc and tcp."""

import threading
import time

import httpx
import pytest
import torch

from tercet.testing import TINY_SETTINGS

LAYOUTS = [(1, "ipc"), (1, "tcp"), (2, "ipc"), (2, "tcp")]
LONG = {"max_new_tokens": 600, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module", params=LAYOUTS, ids=[f"dp{dp}-{transport}" for dp, transport in LAYOUTS])
def server(request, start_server, tiny_llama_dir):
    dp_size, transport = request.param
    running = start_server(tiny_llama_dir, TINY_SETTINGS + [f"scheduler.dp_size={dp_size}", f"ipc.transport={transport}"])
    running.dp_size = dp_size
    yield running
    running.stop()


@pytest.fixture(scope="module")
def other_weights_dir(tmp_path_factory, tiny_llama_dir):
    """The tiny model's architecture with different random weights."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(123)
    model = LlamaForCausalLM(LlamaConfig.from_pretrained(tiny_llama_dir))
    target = tmp_path_factory.mktemp("tiny-llama-other")
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(target)
    return target


def generate(server, text="Tell me a story", **params):
    body = {"text": text, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True, **params}}
    response = httpx.post(server.base_url + "/generate", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def in_background(server, rid, params=LONG):
    """Start a long request; the thread's result holds its final meta info."""
    result = {}

    def run():
        body = {"text": "Count slowly", "rid": rid, "sampling_params": params}
        result["answer"] = httpx.post(server.base_url + "/generate", json=body, timeout=120).json()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def wait_until_running(server, count=1, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = httpx.get(server.base_url + "/get_server_info").json()["ranks"]
        if sum(rank["num_running_requests"] for rank in ranks) >= count:
            return
        time.sleep(0.02)
    raise AssertionError("the request never started")


def test_server_info_shows_every_rank_and_spreads_requests(server):
    for index in range(4):
        generate(server, text=f"question number {index}")
    info = httpx.get(server.base_url + "/get_server_info").json()
    assert [rank["rank"] for rank in info["ranks"]] == list(range(server.dp_size))
    assert info["config"]["scheduler"]["dp_size"] == server.dp_size
    assert all(rank["kv_total_tokens"] > 0 and rank["prompt_tokens_admitted"] > 0 for rank in info["ranks"])
    assert all(rank["num_running_requests"] == 0 for rank in info["ranks"])


def test_flush_cache_is_refused_while_requests_run_unless_asked_to_wait(server):
    assert httpx.post(server.base_url + "/flush_cache").json()["ok"] is True
    thread, _ = in_background(server, "flush-blocker", {**LONG, "max_new_tokens": 300})
    wait_until_running(server)
    refused = httpx.post(server.base_url + "/flush_cache")
    assert refused.status_code == 409 and "in flight" in refused.json()["error"]["message"]
    waited = httpx.post(server.base_url + "/flush_cache", json={"timeout": 60}, timeout=90)
    assert waited.status_code == 200
    thread.join()


def test_abort_one_request_and_all_requests(server):
    thread, result = in_background(server, "to-abort")
    wait_until_running(server)
    assert httpx.post(server.base_url + "/abort_request", json={"rid": "to-abort"}).json()["aborted"] is True
    thread.join()
    assert result["answer"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert httpx.post(server.base_url + "/abort_request", json={"rid": "unknown"}).json()["aborted"] is False

    threads = [in_background(server, f"bulk-{index}") for index in range(2)]
    wait_until_running(server, count=2)
    aborted = httpx.post(server.base_url + "/abort_request", json={"abort_all": True}).json()
    assert aborted["num_aborted"] == 2
    for thread, result in threads:
        thread.join()
        assert result["answer"]["meta_info"]["finish_reason"]["type"] == "abort"


def test_pause_holds_requests_and_continue_resumes_them(server):
    assert httpx.post(server.base_url + "/pause_generation").json()["is_paused"] is True
    try:
        thread, result = in_background(server, "paused", {**LONG, "max_new_tokens": 5})
        time.sleep(1.0)
        assert "answer" not in result
        info = httpx.get(server.base_url + "/get_server_info").json()
        assert all(rank["is_paused"] for rank in info["ranks"])
    finally:
        httpx.post(server.base_url + "/continue_generation")
    thread.join(60)
    assert result["answer"]["meta_info"]["completion_tokens"] == 5


def test_update_weights_from_disk(server, tiny_llama_dir, other_weights_dir):
    before = generate(server)["output_ids"]
    bad = httpx.post(server.base_url + "/update_weights_from_disk", json={"model_path": "/no/such/checkpoint"})
    assert bad.status_code == 400 and "previous weights keep serving" in bad.json()["error"]["message"]
    assert generate(server)["output_ids"] == before

    thread, result = in_background(server, "across-update", {**LONG, "max_new_tokens": 200})
    wait_until_running(server)
    switched = httpx.post(server.base_url + "/update_weights_from_disk", json={"model_path": str(other_weights_dir)}, timeout=120)
    assert switched.status_code == 200 and switched.json()["num_ranks"] == server.dp_size
    assert generate(server)["output_ids"] != before
    thread.join()
    # The in-flight request paused during the reload and then finished.
    assert result["answer"]["meta_info"]["completion_tokens"] == 200

    restored = httpx.post(server.base_url + "/update_weights_from_disk", json={"model_path": str(tiny_llama_dir)}, timeout=120)
    assert restored.status_code == 200
    assert generate(server)["output_ids"] == before
