"""``GET /metrics`` scraped while a real server serves: the values move as the traffic did."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tercet.testing import TINY_SETTINGS, wait_for_ranks

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
                during = scrape(server)
                assert value(during, "tercet:num_requests_running", dp_rank="0") == 1
                assert value(during, "tercet:kv_cache_usage_perc", dp_rank="0") > 0
            finally:
                assert client.post("/continue_generation").status_code == 200
            rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda index: completion(server, index), range(8)))
    prompt_tokens = sum(answer["usage"]["prompt_tokens"] for answer in answers)
    wait_for_ranks(server.base_url, lambda ranks: ranks[0]["num_running_requests"] == 0)
    after = scrape(server)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    finished = 8 + 1
    assert grew("tercet:request_success_total", finished_reason="length") == finished
    assert grew("tercet:generation_tokens_total") == 8 * TOKENS + 200
    assert grew("tercet:prompt_tokens_total") >= prompt_tokens  # and the held one's
    for histogram in ("tercet:time_to_first_token_seconds", "tercet:e2e_request_latency_seconds",
                      "tercet:request_queue_time_seconds"):
        assert grew(histogram + "_count") == finished, histogram
        assert grew(histogram + "_sum") > 0, histogram
    # Every token after a completion's first is one inter-token latency.
    assert grew("tercet:inter_token_latency_seconds_count") == 8 * (TOKENS - 1) + 199
    assert grew("tercet:prefix_cache_queries_total") >= prompt_tokens
    assert value(after, "tercet:num_requests_running") == value(after, "tercet:num_requests_waiting") == 0
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
    assert asked and asked <= served, asked - served
