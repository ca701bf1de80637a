"""The cache_aware balancer: longest prefix within load bounds, where new prefixes go, its options, and two API workers."""

from __future__ import annotations

import dataclasses

import pytest

from tercet.config import TercetConfig, load_config
from tercet.errors import ConfigError
from tercet.frontend.load_balancer import EvictedPrefix, RoutingRequest
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.cache_aware_balancer.balancer import CacheAware, CacheAwareOptions

SYSTEM_A = list(range(1000, 1064))
SYSTEM_B = list(range(2000, 2064))


def balancer(num_ranks=2, api_workers=1, **options) -> CacheAware:
    config = TercetConfig(plugins={"cache_aware": options})
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, api_workers=api_workers))
    return CacheAware(config, num_ranks)


def route(chooser: CacheAware, tokens, loads=(0, 0), rid="r") -> int:
    request = RoutingRequest(rid, tokens)
    rank = chooser.choose_rank(request, list(loads))
    chooser.routed(request, rank)
    return rank


def test_it_is_registered_through_its_entry_point():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).load_balancers
    assert registry.entries["cache_aware"].plugin_name == "cache_aware_balancer"
    assert isinstance(registry.get("cache_aware")(TercetConfig(), 3), CacheAware)


def test_new_prefixes_spread_to_the_smallest_tree_and_then_stay_with_their_rank():
    chooser = balancer()
    rank_a = route(chooser, SYSTEM_A + [1])
    rank_b = route(chooser, SYSTEM_B + [1])
    assert rank_b == 1 - rank_a
    assert [route(chooser, SYSTEM_A + [index]) for index in range(2, 6)] == [rank_a] * 4
    assert [route(chooser, SYSTEM_B + [index]) for index in range(2, 6)] == [rank_b] * 4


def test_a_match_under_the_cache_threshold_counts_as_a_new_prefix():
    chooser = balancer(cache_threshold=0.8)
    rank_a = route(chooser, SYSTEM_A)
    route(chooser, SYSTEM_B + SYSTEM_B)  # the other rank, whose tree is now the larger
    assert route(chooser, SYSTEM_A + list(range(40))) == rank_a  # 64 of 104 held: 0.62, under 0.8: smaller tree
    assert route(chooser, SYSTEM_B[:60] + list(range(5000, 5040))) == rank_a  # 60 of 100 on the other: smaller tree


@pytest.mark.parametrize(("loads", "uneven"), [
    ((0, 8), False),  # 8 more is not past balance_abs_threshold = 8
    ((0, 9), True),  # past both: 9 more, and 9 > 1.5 * 0
    ((20, 29), False),  # 9 more, but 29 is not past 1.5 * 20 = 30
    ((20, 31), True),
])
def test_loads_are_uneven_past_both_thresholds_and_then_the_least_loaded_rank_is_chosen(loads, uneven):
    chooser = balancer()
    rank_a = route(chooser, SYSTEM_A)
    busy_first = (loads[1], loads[0]) if rank_a == 0 else loads  # the prefix's own rank is the busy one
    expected = 1 - rank_a if uneven else rank_a
    assert chooser.is_uneven(list(busy_first)) == uneven
    assert route(chooser, SYSTEM_A + [5], busy_first) == expected


def test_the_thresholds_are_options():
    chooser = balancer(balance_abs_threshold=2, balance_rel_threshold=1.0)
    assert chooser.is_uneven([0, 3]) and chooser.is_uneven([4, 7]) and not chooser.is_uneven([4, 6])


def test_an_eviction_report_stops_a_rank_attracting_the_prefix():
    chooser = balancer(placement="prefix_hash")
    rank_a = route(chooser, SYSTEM_A + [1, 2])
    assert chooser.trees[rank_a].match(SYSTEM_A) == 64
    chooser.evicted(rank_a, [EvictedPrefix(tuple(SYSTEM_A[:16]), 0)])
    assert chooser.trees[rank_a].match(SYSTEM_A) == 0 and chooser.trees[rank_a].num_tokens == 0


def test_two_api_workers_send_a_prefix_to_the_same_rank_whichever_sees_it_first():
    # Each worker keeps its own trees; with several workers a new prefix goes by its first tokens' hash.
    workers = [balancer(num_ranks=4, api_workers=2) for _ in range(2)]
    assert {worker.placement for worker in workers} == {"prefix_hash"}
    tenants = [list(range(base, base + 300)) for base in range(0, 30000, 1000)]
    first = [route(workers[0], tenant + [1]) for tenant in tenants]
    later = [route(workers[1], tenant + [2]) for tenant in reversed(tenants)][::-1]
    assert first == later
    assert len(set(first)) == 4  # and the prefixes spread over the ranks
    # A worker that once had to spill a tenant to another rank (uneven loads) still breaks the tie the same way.
    spilled = route(workers[0], tenants[0] + [3], loads=[0 if rank != first[0] else 50 for rank in range(4)])
    assert spilled != first[0]
    assert route(workers[0], tenants[0] + [4]) == route(workers[1], tenants[0] + [4]) == first[0]


def test_one_api_worker_places_new_prefixes_by_tree_size_unless_told_otherwise():
    assert balancer().placement == "smallest_tree"
    assert balancer(placement="prefix_hash").placement == "prefix_hash"
    assert balancer(api_workers=3, placement="smallest_tree").placement == "smallest_tree"


def test_options_come_from_the_plugins_table_and_bad_ones_are_named(tmp_path):
    config_file = tmp_path / "tercet.toml"
    config_file.write_text("[plugins.cache_aware]\ncache_threshold = 1\nbalance_abs_threshold = 4\n")
    options = CacheAwareOptions.of(load_config(str(config_file), environ={}))
    assert (options.cache_threshold, options.balance_abs_threshold) == (1.0, 4)
    for table, message in [({"cache_treshold": 0.5}, "unknown option 'cache_treshold'"),
                           ({"balance_abs_threshold": 1.5}, "balance_abs_threshold = 1.5"),
                           ({"cache_threshold": -1}, "cache_threshold = -1"),
                           ({"placement": "nearest"}, "placement = 'nearest'"),
                           ({"balance_rel_threshold": True}, "balance_rel_threshold = True")]:
        with pytest.raises(ConfigError, match=message):
            CacheAwareOptions.of(TercetConfig(plugins={"cache_aware": table}))
