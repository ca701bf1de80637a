"""Load balancing by cached prefix on real servers of two data-parallel ranks.

Which rank served a request shows in ``/metrics`` (``tercet:request_success_total`` per
``dp_rank``), and how much of the prompts each rank found cached in
``tercet:prefix_cache_hits_total`` / ``tercet:prefix_cache_queries_total``: the tests read
counts, never timings. Every tenant's system prompt starts with the same word and
``hash_prefix_tokens = 1``, so the order ties are broken in is the same for every prompt
and what follows from it is known here.
"""

from __future__ import annotations

import random
import re
import time

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

DP = ["scheduler.dp_size=2"]
CACHE_AWARE = [*TINY_SETTINGS, *DP, "scheduler.load_balance=cache_aware", "plugins.cache_aware.hash_prefix_tokens=1"]
ROUND_ROBIN = [*TINY_SETTINGS, *DP, "scheduler.load_balance=round_robin"]
TIMEOUT = 120
WORDS = "river stone light cloud paper garden window music orange silver forest engine letter market winter".split()


def system_prompt(tenant: int) -> str:
    rng = random.Random(tenant)
    return f"Tenant {tenant} rules: " + " ".join(rng.choice(WORDS) for _ in range(120)) + "."


def generate(server, text: str) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0, "ignore_eos": True}}
    response = httpx.post(server.base_url + "/generate", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def per_rank(server, name: str) -> dict[str, float]:
    counts: dict[str, float] = {"0": 0.0, "1": 0.0}
    for line in httpx.get(server.base_url + "/metrics", timeout=TIMEOUT).text.splitlines():
        match = re.match(name + r'\{.*dp_rank="(\d+)".*\} (\S+)', line)
        if match:
            counts[match.group(1)] += float(match.group(2))
    return counts


def finished_since(server, before: dict[str, float]) -> dict[str, float]:
    after = per_rank(server, "tercet:request_success_total")
    return {rank: after[rank] - before[rank] for rank in after}


def served_by(server, send) -> dict[str, float]:
    """Completions each rank finished while ``send()`` ran."""
    before = per_rank(server, "tercet:request_success_total")
    send()
    return finished_since(server, before)


def cached_tokens(server) -> tuple[float, float]:
    """Prompt tokens found in the ranks' prefix caches, and prompt tokens admitted, over both ranks."""
    return (sum(per_rank(server, "tercet:prefix_cache_hits_total").values()),
            sum(per_rank(server, "tercet:prefix_cache_queries_total").values()))


@pytest.fixture(scope="module")
def cache_aware(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, CACHE_AWARE)


def test_prompts_sharing_a_prefix_go_to_one_rank_and_a_new_prefix_to_the_other(cache_aware):
    first = served_by(cache_aware, lambda: [generate(cache_aware, system_prompt(0) + f" Question {index}?")
                                            for index in range(4)])
    assert sorted(first.values()) == [0, 4]
    second = served_by(cache_aware, lambda: [generate(cache_aware, system_prompt(1) + f" Question {index}?")
                                             for index in range(4)])
    assert sorted(second.values()) == [0, 4] and second != first  # the smaller tree: the other rank
    again = served_by(cache_aware, lambda: generate(cache_aware, system_prompt(0) + " One more?"))
    assert again == {rank: count / 4 for rank, count in first.items()}


def test_a_rank_that_evicted_a_prefix_stops_attracting_it(cache_aware):
    tenant_rank = served_by(cache_aware, lambda: generate(cache_aware, system_prompt(1) + " Before?"))
    assert httpx.post(cache_aware.base_url + "/flush_cache", timeout=TIMEOUT).status_code == 200
    # Each rank reports its evictions before its next metrics report: once /metrics shows the
    # flush, the API process has the reports, and both ranks' trees are empty.
    wait_for_empty_caches(cache_aware)
    # Both trees empty and tied, so the prompt goes first in the order its first token fixes,
    # which is where tenant 0 went when both trees were empty at the start: not tenant 1's rank.
    after = served_by(cache_aware, lambda: generate(cache_aware, system_prompt(1) + " After?"))
    assert after != tenant_rank and sorted(after.values()) == [0, 1]


def wait_for_empty_caches(server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while any(per_rank(server, "tercet:kv_cache_evictable_perc").values()):
        assert time.monotonic() < deadline, "the ranks' metrics never showed the flush"
        time.sleep(0.05)


def test_cache_hits_are_higher_than_round_robin_on_a_multi_tenant_workload(start_server, tiny_llama_dir):
    order = [tenant for tenant in range(4) for _ in range(6)]
    random.Random(7).shuffle(order)
    prompts = [system_prompt(tenant + 10) + f" Question {index}?" for index, tenant in enumerate(order)]
    results = {}
    for name, settings in (("round_robin", ROUND_ROBIN), ("cache_aware", CACHE_AWARE)):
        server = start_server(tiny_llama_dir, settings)
        served = served_by(server, lambda: [generate(server, prompt) for prompt in prompts])
        hits, queries = cached_tokens(server)
        results[name] = (hits / queries, served)
        server.stop()
    (round_robin_rate, _), (cache_aware_rate, cache_aware_served) = results["round_robin"], results["cache_aware"]
    assert cache_aware_rate > round_robin_rate, results
    assert min(cache_aware_served.values()) >= 6, results  # two tenants a rank: both ranks work


def sent_per_worker(server) -> dict[str, float]:
    counts = {"1": 0.0, "2": 0.0}
    for line in httpx.get(server.base_url + "/metrics", timeout=TIMEOUT).text.splitlines():
        match = re.match(r'tercet:api_worker_requests_total\{.*api_worker="(\d+)".*\} (\S+)', line)
        if match:
            counts[match.group(1)] += float(match.group(2))
    return counts


def test_two_api_workers_send_a_prefix_to_the_same_rank(start_server, tiny_llama_dir):
    # Each worker keeps its own trees; a new prefix goes where its first tokens hash to, in both.
    server = start_server(tiny_llama_dir, [*TINY_SETTINGS, *DP, "scheduler.load_balance=cache_aware",
                                           "server.api_workers=2"])
    ranks_used = set()
    for tenant in range(20, 24):
        workers_before, ranks_before = sent_per_worker(server), per_rank(server, "tercet:request_success_total")
        for index in range(60):  # each request on a fresh connection, which either worker may take
            generate(server, system_prompt(tenant) + f" Question {index}?")
            workers = sent_per_worker(server)
            if index >= 3 and all(workers[worker] > workers_before[worker] for worker in workers):
                break
        else:
            raise AssertionError(f"60 connections and a worker got none: {workers}")
        served = finished_since(server, ranks_before)
        assert sorted(served.values())[0] == 0, served  # every request of the tenant on one rank
        ranks_used |= {rank for rank, count in served.items() if count}
    assert ranks_used == {"0", "1"}  # and the tenants spread over both
