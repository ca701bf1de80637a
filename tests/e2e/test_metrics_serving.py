"""``GET /metrics`` scraped while a real server serves: the values move as the traffic did, and a
scrape answers at once while a rank is stuck in a long step.

The ranks send their figures between steps, so what a scrape shows of them may lag
the traffic by a report: checks of rank figures wait until a scrape shows them.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tercet.testing import TINY_SETTINGS, wait_for_ranks, write_plugin_folder

TIMEOUT = 120
TOKENS = 6  # every request generates exactly this many (ignore_eos)


def scrape(server) -> dict[tuple[str, tuple], float]:
    response = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, series), v in samples.items() if n == name and set(labels.items()) <= set(series))


def scrape_until(server, condition, what: str) -> dict:
    """The first scrape for which ``condition(samples)`` holds (the ranks' next report shows it)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        samples = scrape(server)
        if condition(samples):
            return samples
        assert time.monotonic() < deadline, f"no scrape showed {what} in {TIMEOUT} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS)


def completion(server, index: int) -> dict:
    body = {"prompt": f"metrics request {index}", "max_tokens": TOKENS, "ignore_eos": True, "temperature": 0}
    return httpx.post(server.base_url + "/v1/completions", json=body, timeout=TIMEOUT).json()


def test_the_metrics_follow_the_traffic(server):
    before = scrape(server)
    model = httpx.get(server.base_url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    assert value(before, "tercet:num_requests_running", model_name=model, dp_rank="0") == 0

    # One request held mid-way (generation paused once it has started) shows as running.
    body = {"prompt": "held", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as client:
        with client.stream("POST", "/v1/completions", json=body) as held:
            lines = held.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            assert client.post("/pause_generation").status_code == 200
            try:
                during = scrape_until(server, lambda samples: value(
                    samples, "tercet:num_requests_running", dp_rank="0") == 1, "the held request running")
                assert value(during, "tercet:kv_cache_usage_perc", dp_rank="0") > 0
                assert value(during, "tercet:cache_config_info", dp_rank="0", page_size="8", prefix_cache="true") == 1
            finally:
                assert client.post("/continue_generation").status_code == 200
            rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda index: completion(server, index), range(8)))
    prompt_tokens = sum(answer["usage"]["prompt_tokens"] for answer in answers)
    finished = 8 + 1
    wait_for_ranks(server.base_url, lambda ranks: ranks[0]["num_running_requests"] == 0)
    after = scrape_until(server, lambda samples: value(samples, "tercet:request_decode_time_seconds_count") - value(
        before, "tercet:request_decode_time_seconds_count") == finished, "every completion's decode time")

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("tercet:request_success_total", finished_reason="length") == finished
    assert grew("tercet:generation_tokens_total") == 8 * TOKENS + 200
    assert grew("tercet:prompt_tokens_total") >= prompt_tokens  # and the held one's
    for histogram in ("tercet:time_to_first_token_seconds", "tercet:e2e_request_latency_seconds",
                      "tercet:request_queue_time_seconds", "tercet:request_prefill_time_seconds",
                      "tercet:request_decode_time_seconds", "tercet:request_prompt_tokens",
                      "tercet:request_generation_tokens"):
        assert grew(histogram + "_count") == finished, histogram
        assert grew(histogram + "_sum") > 0, histogram
    # Every token after a completion's first is one inter-token latency.
    assert grew("tercet:inter_token_latency_seconds_count") == 8 * (TOKENS - 1) + 199
    assert grew("tercet:prefix_cache_queries_total") >= prompt_tokens
    assert value(after, "tercet:num_requests_running") == value(after, "tercet:num_requests_waiting") == 0
    assert grew("tercet:request_generation_tokens_sum") == 8 * TOKENS + 200
    assert value(after, "tercet:request_generation_tokens_bucket", le="5.0") - value(
        before, "tercet:request_generation_tokens_bucket", le="5.0") == 0  # every one generated 6 or 200
    assert value(after, "tercet:num_preemptions_total", dp_rank="0") == 0
    assert value(after, "process_resident_memory_bytes") > 0
    assert 0 <= value(after, "tercet:prefix_cache_hit_rate", dp_rank="0") <= 1


def test_a_request_its_client_left_counts_as_aborted(server):
    before = scrape(server)
    body = {"prompt": "left", "max_tokens": 500, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            next(line for line in response.iter_lines() if line.startswith("data: "))
    # Leaving closed the stream, which aborts the request; wait for the scheduler to end it.
    wait_for_ranks(server.base_url, lambda ranks: ranks[0]["num_running_requests"] == 0)
    after = scrape(server)
    aborted = value(after, "tercet:request_success_total", finished_reason="abort")
    assert aborted - value(before, "tercet:request_success_total", finished_reason="abort") == 1


def test_the_grafana_dashboard_asks_only_for_metrics_the_server_has(server):
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    asked = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"tercet:[a-z0-9_]+", target["expr"])}
    completion(server, 99)  # a labelled series appears once something was observed for it
    served = {name for name, _ in scrape(server)}
    # A tier's series exist only with [cache] storage set: tests/e2e/test_kv_storage_serving.py asks those.
    asked = {name for name in asked if not name.startswith("tercet:kv_storage_")}
    assert asked and asked <= served, asked - served


# A policy that holds the scheduler's step while a request of priority HOLD_PRIORITY waits, until
# the test creates the file "release" (or two minutes pass): a step as long as the test wants.
HOLDING_POLICY = '''
import os
import time
from pathlib import Path

from tercet.plugin_api import SchedulingPolicy, hookimpl

HOLD_PRIORITY = 77
FOLDER = Path(os.environ["TERCET_TEST_HOLD_FOLDER"])


class HoldingPolicy(SchedulingPolicy):
    def order(self, waiting, view):
        if any(req.priority == HOLD_PRIORITY for req in waiting):
            (FOLDER / "holding").touch()
            deadline = time.monotonic() + 120
            while not (FOLDER / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return sorted(waiting, key=lambda req: req.arrival_index)


@hookimpl
def register_scheduling_policies(register):
    register("holding", HoldingPolicy)
'''
NUM_SCRAPES = 20
NUM_STREAMS = 16


@pytest.fixture(scope="module")
def holding_server(start_server, tiny_llama_dir, tmp_path_factory):
    plugin_folder = write_plugin_folder(tmp_path_factory.mktemp("holding-plugin"), {"holding": "tercet_holding"},
                                        modules={"tercet_holding": HOLDING_POLICY}, distribution="tercet-holding")
    hold_folder = tmp_path_factory.mktemp("hold")
    server = start_server(tiny_llama_dir, [*TINY_SETTINGS, "scheduler.policy=holding"],
                          env={"PYTHONPATH": str(plugin_folder), "TERCET_TEST_HOLD_FOLDER": str(hold_folder)})
    server.hold_folder = hold_folder
    return server


def timed_scrapes(server, count: int) -> tuple[list[float], dict]:
    """Seconds each of ``count`` scrapes took, and the last one's samples."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        samples = scrape(server)
        seconds.append(time.perf_counter() - started)
    return seconds, samples


def test_a_scrape_answers_while_a_rank_is_in_a_long_step(holding_server, record_property):
    server, folder = holding_server, holding_server.hold_folder
    completion(server, 1)
    held = threading.Thread(target=lambda: httpx.post(server.base_url + "/generate", timeout=TIMEOUT, json={
        "text": "held", "priority": 77, "sampling_params": {"max_new_tokens": 2}}))
    held.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (folder / "holding").exists():  # the step has begun and will not end until released
            assert time.monotonic() < deadline, "the holding policy was never called"
            time.sleep(0.01)
        during_step, samples = timed_scrapes(server, NUM_SCRAPES)
        assert not (folder / "release").exists()  # every scrape was answered inside the one step
        assert value(samples, "tercet:request_success_total", finished_reason="length") == 1
        assert value(samples, "tercet:num_requests_running", dp_rank="0") == 0  # the figures from before it
        assert value(samples, "tercet:rank_metrics_age_seconds", dp_rank="0") > 0
    finally:
        (folder / "release").touch()
        held.join()
    with ThreadPoolExecutor(NUM_STREAMS) as pool:
        load = [pool.submit(completion, server, index) for index in range(4 * NUM_STREAMS)]
        under_load, _ = timed_scrapes(server, NUM_SCRAPES)
        assert all("choices" in answer.result() for answer in load)
    record_property("longest_scrape_during_a_long_step_ms", round(max(during_step) * 1000, 1))
    record_property("longest_scrape_under_load_ms", round(max(under_load) * 1000, 1))
    # Under load the scraper shares this process with the clients' threads, which slows it too.
    print(f"\nlongest scrape: {max(during_step) * 1000:.1f} ms inside one long step, "
          f"{max(under_load) * 1000:.1f} ms beside {NUM_STREAMS} client threads")
