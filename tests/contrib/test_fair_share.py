"""The fair-share policy arrives only by installing its distribution, as a third party's would."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
from contrib_install import contrib_installed

from tercet.config import TercetConfig
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.scheduler.policy import SchedulerView
from tercet.testing import make_request_view

DISTRIBUTION = "tercet-fair-share"
NO_VIEW = SchedulerView(running=[], prefix_cache=None)


def installed_policy_names() -> list[str]:
    return PluginRegistries.from_plugin_manager(create_plugin_manager()).scheduling_policies.names()


@dataclass(frozen=True)
class Installation:
    policy_names_before: list[str]


@pytest.fixture(scope="session")
def fair_share_installed(tmp_path_factory):
    with contrib_installed(DISTRIBUTION, "tercet_fair_share", tmp_path_factory.mktemp("contrib"),
                           installed_policy_names) as before:
        yield Installation(before)


def make_fair_share(config=None):
    return PluginRegistries.from_plugin_manager(create_plugin_manager()).scheduling_policies.get("fair-share")(
        config or TercetConfig()
    )


def tenant_request(rid, arrival_index, tenant, num_prompt_tokens=4, max_new_tokens=4):
    return make_request_view(rid, arrival_index, [1] * num_prompt_tokens, max_new_tokens=max_new_tokens, tenant=tenant)


def rids(reqs):
    return [req.rid for req in reqs]


def test_it_is_found_only_through_its_entry_point_once_installed(fair_share_installed):
    assert "fair-share" not in fair_share_installed.policy_names_before
    plugin_manager = create_plugin_manager()
    registry = PluginRegistries.from_plugin_manager(plugin_manager).scheduling_policies
    assert "fair-share" in registry.names()
    assert registry.entries["fair-share"].plugin_name == "fair_share"
    assert "fair-share" not in PluginRegistries.from_plugin_manager(
        create_plugin_manager(load_entry_points=False)
    ).scheduling_policies.names()


def test_tercet_plugins_shows_its_distribution(fair_share_installed):
    listing = subprocess.run([sys.executable, "-m", "tercet", "plugins", "--json"],
                             check=True, capture_output=True, text=True, timeout=120)
    (described,) = [plugin for plugin in json.loads(listing.stdout) if plugin["name"] == "fair_share"]
    assert described["distribution"] == DISTRIBUTION
    assert described["module"] == "tercet_fair_share"
    assert {"kind": "scheduling policy", "name": "fair-share"} in described["registers"]


def test_a_later_tenant_is_not_stuck_behind_an_earlier_ones_burst(fair_share_installed):
    waiting = [tenant_request("a1", 0, "A"), tenant_request("a2", 1, "A"), tenant_request("a3", 2, "A"), tenant_request("b1", 3, "B")]
    fcfs = PluginRegistries.from_plugin_manager(create_plugin_manager()).scheduling_policies.get("fcfs")(TercetConfig())
    assert rids(fcfs.order(waiting, NO_VIEW)) == ["a1", "a2", "a3", "b1"]
    assert rids(make_fair_share().order(waiting, NO_VIEW)) == ["a1", "b1", "a2", "a3"]


def test_the_tenant_served_least_goes_first(fair_share_installed):
    policy = make_fair_share()
    big = tenant_request("a-big", 0, "A", num_prompt_tokens=100)
    assert rids(policy.order([big], NO_VIEW)) == ["a-big"]
    # a-big left the queue: it was admitted, and A's account holds its tokens.
    view = SchedulerView(running=[big], prefix_cache=None)
    waiting = [tenant_request("a1", 1, "A"), tenant_request("b1", 2, "B"), tenant_request("b2", 3, "B")]
    assert rids(policy.order(waiting, view)) == ["b1", "b2", "a1"]


def test_an_idle_tenant_joins_at_the_busy_ones_level(fair_share_installed):
    policy = make_fair_share()
    for index in range(3):  # A is served alone for a while
        policy.order([tenant_request(f"a{index}", index, "A")], NO_VIEW)
    running = [tenant_request("a-running", 3, "A")]  # A's last request is still running
    view = SchedulerView(running=running, prefix_cache=None)
    policy.order([], view)
    waiting = [tenant_request("b1", 4, "B"), tenant_request("b2", 5, "B"), tenant_request("a4", 6, "A")]
    # B joins at A's completed service (24 - 8 running = 16), not at 0: it gets
    # one request's head start, then the tie goes to the earlier arrival.
    assert rids(policy.order(waiting, view)) == ["b1", "b2", "a4"]
    assert policy.accounts["B"] == 16


def test_requests_without_a_tenant_share_the_default_tenant(fair_share_installed):
    waiting = [tenant_request("n1", 0, None), tenant_request("n2", 1, None), tenant_request("d1", 2, "default"), tenant_request("c1", 3, "C")]
    assert rids(make_fair_share().order(waiting, NO_VIEW)) == ["n1", "c1", "n2", "d1"]


def test_weights_give_a_tenant_a_bigger_share(fair_share_installed):
    config = TercetConfig(plugins={"fair_share": {"weights": {"A": 2}}})
    waiting = [tenant_request(f"a{index}", index, "A") for index in range(4)] + [tenant_request(f"b{index}", 4 + index, "B") for index in range(2)]
    assert rids(make_fair_share(config).order(waiting, NO_VIEW)) == ["a0", "b0", "a1", "a2", "b1", "a3"]


def test_a_weight_that_is_not_positive_is_named(fair_share_installed):
    with pytest.raises(ValueError, match=r"weights.A must be a positive number"):
        make_fair_share(TercetConfig(plugins={"fair_share": {"weights": {"A": 0}}}))


@pytest.mark.e2e
def test_a_server_selects_it_in_toml_and_serves_tenants_fairly(fair_share_installed, tercet_start_server, tiny_llama_dir):
    """End to end: chosen in tercet.toml, tenants from the X-Tenant header."""
    import asyncio
    import time as clock

    import httpx

    from tercet.testing import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks

    server = tercet_start_server(tiny_llama_dir, TINY_SETTINGS[:2],
                                 config='[scheduler]\npolicy = "fair-share"\nmax_running_requests = 1\n')
    finished: list[str] = []

    async def send(client, name, tenant, max_new_tokens):
        response = await client.post(
            "/generate", headers={"X-Tenant": tenant},
            json={"text": name, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}},
        )
        response.raise_for_status()
        finished.append(name)

    async def scenario():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            first = asyncio.create_task(send(client, "a1", "a", 900))
            await asyncio.to_thread(wait_for_ranks, server.base_url, lambda ranks: num_running(ranks) == 1)
            rest = []
            for queued, (name, tenant) in enumerate([("a2", "a"), ("a3", "a"), ("b1", "b")], start=1):
                # One at a time, so they arrive in this order, all while a1 runs.
                rest.append(asyncio.create_task(send(client, name, tenant, 20)))
                await asyncio.to_thread(wait_for_ranks, server.base_url, lambda ranks, q=queued: num_waiting(ranks) == q)
            await asyncio.gather(first, *rest)

    try:
        started = clock.monotonic()
        asyncio.run(scenario())
        assert clock.monotonic() - started < 300
    finally:
        assert server.stop() == 0
    # First come, first served would finish a2 and a3 before b1.
    assert finished.index("b1") < finished.index("a3")
    assert finished[0] == "a1"
