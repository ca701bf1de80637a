"""A real server of the default model with an int8 KV cache: what it reports (the pool's dtype and its
tokens, about twice bfloat16's in the default model.kv_cache_memory, in /get_server_info and /metrics) and that
it serves; a backend that
cannot read the cache is refused at start-up, naming the setting."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from test_metrics_serving import scrape_until, value

pytestmark = pytest.mark.real_model

# The default 192 MiB: bfloat16 K/V of SmolLM2-135M hold 8,736 tokens (docs/configuration.md).
BFLOAT16_TOKENS = 8736


@pytest.fixture(scope="module")
def int8_server(start_server):
    return start_server(None, ["cache.kv_dtype=int8", "scheduler.max_running_requests=4"])


def test_the_server_reports_its_int8_pool_and_the_tokens_it_holds(int8_server):
    info = httpx.get(int8_server.base_url + "/get_server_info", timeout=60).json()
    weights = info["ranks"][0]["weights"]
    assert info["config"]["cache"]["kv_dtype"] == "int8"
    assert (weights["kv_dtype"], weights["dtype"]) == ("int8", "bfloat16")
    assert weights["max_total_tokens"] == 16944 >= 1.9 * BFLOAT16_TOKENS
    assert "KV cache of 16944 tokens in int8" in int8_server.log()


def test_it_answers_a_chat_greedily_twice_the_same(int8_server):
    body = {"model": "SmolLM2-135M-Instruct", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    answers = [httpx.post(int8_server.base_url + "/v1/chat/completions", json=body, timeout=120).json()
               for _ in range(2)]
    texts = [answer["choices"][0]["message"]["content"] for answer in answers]
    assert texts[0].strip() and texts[0] == texts[1]


def test_metrics_name_the_pool_dtype(int8_server):
    """The rank's figures reach /metrics between steps: a request makes one report, then a scrape shows it."""
    body = {"prompt": "The pool stores", "max_tokens": 2, "temperature": 0}
    assert httpx.post(int8_server.base_url + "/v1/completions", json=body, timeout=120).status_code == 200
    samples = scrape_until(int8_server, lambda samples: value(samples, "tercet:cache_config_info") > 0,
                           "tercet:cache_config_info")
    assert value(samples, "tercet:cache_config_info") == 1
    assert value(samples, "tercet:cache_config_info", kv_dtype="int8", max_total_tokens="16944") == 1


def test_a_backend_that_cannot_read_it_is_refused_at_start_up():
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "serve", "--set", "cache.kv_dtype=fp8_e4m3",
         "--set", "attention.backend=torch_native", "--port", "0"],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode != 0
    assert 'attention.backend torch_native cannot read a quantized KV cache (cache.kv_dtype = "fp8_e4m3")' in (
        completed.stderr + completed.stdout)
