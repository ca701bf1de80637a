"""GET /kv_stats arrives only by installing its distribution, as a third party's would.

It brings its own control request type, a scheduler handler for it and an HTTP
route; the end-to-end tests run it on real servers with either serializer and
with two data-parallel ranks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
from contrib_install import contrib_installed

from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager, message_handlers

DISTRIBUTION = "tercet-kv-stats"
MODULE = "tercet_kv_stats"
PLUGIN_NAME = "kv_stats"
MESSAGE_TAG = "tercet_kv_stats.kv_stats_req"


def registered_message_tags(load_entry_points: bool = True) -> list[str]:
    plugin_manager = create_plugin_manager(load_entry_points=load_entry_points)
    return PluginRegistries.from_plugin_manager(plugin_manager).message_types.names()


@dataclass(frozen=True)
class Installation:
    message_tags_before: list[str]


@pytest.fixture(scope="session")
def kv_stats_installed(tmp_path_factory):
    with contrib_installed(DISTRIBUTION, MODULE, tmp_path_factory.mktemp("contrib"), registered_message_tags) as before:
        yield Installation(before)


def installed_plugin():
    """The installed plugin module, as the entry point loads it."""
    (plugin,) = [plugin for name, plugin in create_plugin_manager().list_name_plugin() if name == PLUGIN_NAME]
    return plugin


# -- found through its entry point --------------------------------------------


def test_it_is_found_only_through_its_entry_point_once_installed(kv_stats_installed):
    assert MESSAGE_TAG not in kv_stats_installed.message_tags_before
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).message_types
    assert MESSAGE_TAG in registry.names()
    assert registry.entries[MESSAGE_TAG].plugin_name == PLUGIN_NAME
    assert MESSAGE_TAG not in registered_message_tags(load_entry_points=False)


def test_tercet_plugins_shows_its_distribution(kv_stats_installed):
    listing = subprocess.run([sys.executable, "-m", "tercet", "plugins", "--json"],
                             check=True, capture_output=True, text=True, timeout=120)
    (described,) = [plugin for plugin in json.loads(listing.stdout) if plugin["name"] == PLUGIN_NAME]
    assert described["distribution"] == DISTRIBUTION
    assert described["module"] == MODULE
    assert {"kind": "message type", "name": MESSAGE_TAG} in described["registers"]
    assert set(described["hooks"]) == {"register_message_types", "register_message_handlers", "register_http_routes"}


def test_only_the_scheduler_gets_a_handler_and_the_server_gets_the_route(kv_stats_installed):
    plugin = installed_plugin()
    plugin_manager = create_plugin_manager()
    assert (plugin.KvStatsReq, plugin.handle_kv_stats) in message_handlers(plugin_manager, "scheduler")
    for component in ("tokenizer", "detokenizer"):
        assert all(message_type is not plugin.KvStatsReq for message_type, _ in message_handlers(plugin_manager, component))
    route = PluginRegistries.from_plugin_manager(plugin_manager).http_routes.entries["/kv_stats"]
    assert (route.plugin_name, route.obj.endpoint, route.obj.methods) == (PLUGIN_NAME, plugin.kv_stats, ("GET",))


# -- one rank's figures and their sum, without a server --------------------------------


def fake_stats(rank=0, num_total=512, num_free=500, page_size=8, cached_pages=0, admitted=0, from_cache=0):
    """What a scheduler rank hands its plugins' handlers."""
    from tercet.plugin_api import SchedulerStats

    return SchedulerStats(
        rank=rank, num_running_requests=0, num_waiting_requests=0, page_size=page_size,
        kv_used_tokens=(num_total - num_free) * page_size, kv_total_tokens=num_total * page_size,
        prefix_cache_tokens=cached_pages * page_size, prompt_tokens_admitted=admitted,
        prompt_tokens_from_cache=from_cache, num_retractions=0, is_paused=False,
    )


def test_a_rank_reports_its_pages_in_tokens_and_its_hit_rate(kv_stats_installed):
    plugin = installed_plugin()
    stats = fake_stats(rank=1, num_total=512, num_free=448, cached_pages=40, admitted=400, from_cache=100)
    figures = plugin.handle_kv_stats(stats, plugin.KvStatsReq(request_id="r1"))
    assert figures == {
        "rank": 1,
        "kv_used_tokens": 64 * 8,
        "kv_total_tokens": 512 * 8,
        "kv_usage": 64 / 512,
        "prefix_cache_tokens": 40 * 8,
        "prompt_tokens_admitted": 400,
        "prompt_tokens_from_cache": 100,
        "prefix_cache_hit_rate": 0.25,
    }


def test_without_a_prefix_cache_or_any_request_the_figures_are_zero(kv_stats_installed):
    plugin = installed_plugin()
    figures = plugin.handle_kv_stats(fake_stats(num_free=512), plugin.KvStatsReq(request_id="r1"))
    assert figures["kv_used_tokens"] == 0
    assert figures["kv_usage"] == 0.0
    assert figures["prefix_cache_tokens"] == 0
    assert figures["prefix_cache_hit_rate"] == 0.0


@pytest.mark.parametrize("serializer_name", ["msgpack", "pickle"])
def test_the_request_and_its_reply_cross_either_serializer(kv_stats_installed, serializer_name):
    from tercet.ipc.control_messages import ControlReply
    from tercet.ipc.messages import MessageRegistry

    plugin = installed_plugin()
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    serializer = registries.serializers.get(serializer_name)(MessageRegistry.from_plugin_registries(registries))
    request = plugin.KvStatsReq(request_id="control-7")
    assert serializer.decode(serializer.encode(request)) == request
    figures = plugin.handle_kv_stats(fake_stats(admitted=10, from_cache=5), request)
    reply = ControlReply(request_id="control-7", rank=0, ok=True, data=figures)
    assert serializer.decode(serializer.encode(reply)) == reply


class FakeTokenizerManager:
    """Answers control requests the way the Communicator does: one reply per rank, by rank."""

    def __init__(self, replies):
        self.replies = replies
        self.sent = []

    async def control(self, request_type, timeout=30.0, mode="serial", **fields):
        self.sent.append((request_type, mode, fields))
        return self.replies

    def is_healthy(self):
        return True


def route_client(tokenizer_manager):
    from starlette.testclient import TestClient

    from tercet.http.server.app import create_app

    # The app serves every installed plugin's routes, this one's among them.
    # localhost: the app refuses names that are not the server's, TestClient's own "testserver" too.
    return TestClient(create_app(tokenizer_manager), base_url="http://localhost")


def test_the_route_lists_every_rank_and_sums_them(kv_stats_installed):
    from tercet.ipc.control_messages import ControlReply

    plugin = installed_plugin()
    rank_figures = [
        plugin.rank_stats(fake_stats(rank=0, num_total=100, num_free=90, cached_pages=10, admitted=300, from_cache=0)),
        plugin.rank_stats(fake_stats(rank=1, num_total=100, num_free=70, cached_pages=10, admitted=100, from_cache=100)),
    ]
    tokenizer_manager = FakeTokenizerManager(
        [ControlReply(request_id="c", rank=rank, ok=True, data=figures) for rank, figures in enumerate(rank_figures)]
    )
    response = route_client(tokenizer_manager).get("/kv_stats")
    assert response.status_code == 200
    # Read-only, so a probe arriving while another is in flight shares its answer.
    assert tokenizer_manager.sent == [(plugin.KvStatsReq, "shared", {})]
    body = response.json()
    assert body["ranks"] == rank_figures
    assert body["total"] == {
        "kv_used_tokens": 40 * 8,
        "kv_total_tokens": 200 * 8,
        "kv_usage": 0.2,
        "prefix_cache_tokens": 20 * 8,
        "prompt_tokens_admitted": 400,
        "prompt_tokens_from_cache": 100,
        "prefix_cache_hit_rate": 0.25,
    }
    assert route_client(tokenizer_manager).post("/kv_stats").status_code == 405


def test_a_rank_that_fails_is_named(kv_stats_installed):
    from tercet.ipc.control_messages import ControlReply

    plugin = installed_plugin()
    tokenizer_manager = FakeTokenizerManager([
        ControlReply(request_id="c", rank=0, ok=True, data=plugin.rank_stats(fake_stats())),
        ControlReply(request_id="c", rank=1, ok=False, message="no page allocator"),
    ])
    response = route_client(tokenizer_manager).get("/kv_stats")
    assert response.status_code == 500
    assert "rank 1: no page allocator" in response.json()["error"]["message"]


# -- end to end ----------------------------------------------------------------

SHARED_PREFIX = list(range(1000, 1160))  # 160 tokens: 20 whole pages of 8
NUM_SUFFIX_TOKENS = 3


@pytest.mark.e2e
@pytest.mark.parametrize(
    "serializer_name, dp_size",
    [("msgpack", 1), ("msgpack", 2), ("pickle", 2)],
    ids=["msgpack-dp1", "msgpack-dp2", "pickle-dp2"],
)
def test_a_server_reports_each_ranks_kv_and_prefix_hits(kv_stats_installed, tercet_start_server, tiny_llama_dir,
                                                      serializer_name, dp_size):
    """Requests sharing a long prefix, sent one after the other: round robin gives
    every rank two of them, so every rank finds the prefix cached once."""
    import httpx

    from tercet.testing import TINY_SETTINGS

    settings = [*TINY_SETTINGS, f"ipc.serializer={serializer_name}", f"scheduler.dp_size={dp_size}",
                "scheduler.load_balance=round_robin"]
    server = tercet_start_server(tiny_llama_dir, settings)
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            before = client.get("/kv_stats")
            assert before.status_code == 200, before.text
            assert [figures["rank"] for figures in before.json()["ranks"]] == list(range(dp_size))
            assert before.json()["total"]["prompt_tokens_admitted"] == 0
            assert before.json()["total"]["prefix_cache_hit_rate"] == 0.0

            num_requests = 2 * dp_size
            cached_tokens = []
            for index in range(num_requests):
                suffix = [2000 + NUM_SUFFIX_TOKENS * index + offset for offset in range(NUM_SUFFIX_TOKENS)]
                response = client.post("/generate", json={
                    "input_ids": SHARED_PREFIX + suffix,
                    "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True},
                })
                assert response.status_code == 200, response.text
                cached_tokens.append(response.json()["meta_info"]["cached_tokens"])

            response = client.get("/kv_stats")
            assert response.status_code == 200, response.text
            stats = response.json()
    finally:
        assert server.stop() == 0, server.log()

    prompt_len = len(SHARED_PREFIX) + NUM_SUFFIX_TOKENS
    ranks = stats["ranks"]
    assert [figures["rank"] for figures in ranks] == list(range(dp_size))
    for figures in ranks:
        assert figures["kv_total_tokens"] > 0
        assert 0 < figures["kv_usage"] <= 1
        assert figures["kv_used_tokens"] >= figures["prefix_cache_tokens"] >= len(SHARED_PREFIX)
        # Round robin: two requests each; the second finds the first one's 20 pages.
        assert figures["prompt_tokens_admitted"] == 2 * prompt_len
        assert figures["prompt_tokens_from_cache"] == len(SHARED_PREFIX)
        assert figures["prefix_cache_hit_rate"] == pytest.approx(len(SHARED_PREFIX) / (2 * prompt_len))

    total = stats["total"]
    for name in ("kv_used_tokens", "kv_total_tokens", "prefix_cache_tokens", "prompt_tokens_admitted", "prompt_tokens_from_cache"):
        assert total[name] == sum(figures[name] for figures in ranks)
    assert total["prompt_tokens_from_cache"] == sum(cached_tokens) == dp_size * len(SHARED_PREFIX)
    assert total["prefix_cache_hit_rate"] == pytest.approx(1 / 2 * len(SHARED_PREFIX) / prompt_len)
    assert total["kv_usage"] == pytest.approx(total["kv_used_tokens"] / total["kv_total_tokens"])
