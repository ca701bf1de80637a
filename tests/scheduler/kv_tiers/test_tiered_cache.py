"""The prefix cache with a tier below the pool, in a real scheduler on the tiny Llama (float32, greedy):
evicted pages go down, a returning prefix comes back by whole pages, and the tokens are the same
whether its K/V came from the pool, from a tier, or was computed again."""

from __future__ import annotations

import pytest
from tercet.scheduler.metrics_reporter import report_of
from kv_tier_helpers import CONVERSATION, OTHER, PAGE, push_out_and_return, run, tiered_harnesses


@pytest.fixture
def tiered(tercet_scheduler, tmp_path):
    return tiered_harnesses(tercet_scheduler, tmp_path)


@pytest.mark.parametrize("storage", ["host", "file"])
def test_a_prefix_pushed_out_of_the_pool_is_read_back_and_gives_the_same_tokens(tiered, storage):
    harness = tiered(storage)
    first, again = push_out_and_return(harness)
    stats = harness.scheduler.kv_memory.kv_tiers.stats
    assert stats.evictions > 0 and stats.pages_written > 0
    assert stats.lookups >= 1 and stats.hits >= 1 and stats.pages_read >= 1
    assert harness.cached_tokens["again"] == 6 * PAGE  # every whole page of the prompt, none computed
    assert again == first
    recomputed = tiered("none")
    assert push_out_and_return(recomputed) == (first, first)
    assert recomputed.cached_tokens["again"] == 0  # the pool alone lost it
    from_pool = tiered("none", directory=None)
    assert run(from_pool, "a", CONVERSATION) == run(from_pool, "b", CONVERSATION) == first
    assert from_pool.cached_tokens["b"] == 6 * PAGE


def test_without_a_tier_nothing_is_read_back(tiered):
    harness = tiered("none")
    assert harness.scheduler.kv_memory.kv_tiers is None


def evicted_into(harness) -> list[int]:
    """Run the conversation, push it out of the pool, wait for its pages to be written; its tokens."""
    first = run(harness, "first", CONVERSATION)
    run(harness, "other", OTHER)
    harness.scheduler.kv_memory.kv_tiers.demotion.wait()
    return first


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_a_quantized_pools_pages_come_back_with_their_scales(tiered, kv_dtype):
    harness = tiered("file", f"cache.kv_dtype={kv_dtype}")
    first, again = push_out_and_return(harness)
    assert harness.scheduler.kv_memory.kv_tiers.stats.pages_read >= 1
    assert harness.cached_tokens["again"] == 6 * PAGE
    assert again == first  # pages read back without their scales would attend over zeros


def test_a_server_restarted_with_another_kv_dtype_reads_none_of_the_old_pages(tiered, tmp_path):
    first = evicted_into(tiered("file", "cache.kv_dtype=int8", directory=tmp_path))
    restarted = tiered("file", directory=tmp_path)  # float32, as the activations
    run(restarted, "again", CONVERSATION)
    assert restarted.cached_tokens["again"] == 0
    assert restarted.scheduler.kv_memory.kv_tiers.stats.pages_read == 0
    same = tiered("file", "cache.kv_dtype=int8", directory=tmp_path)
    assert run(same, "again", CONVERSATION) == first and same.cached_tokens["again"] == 6 * PAGE


def test_the_file_tier_survives_a_new_scheduler_on_its_directory(tiered, tmp_path):
    first = evicted_into(tiered("file", directory=tmp_path))
    restarted = tiered("file", directory=tmp_path)  # a fresh, empty pool on the same directory
    assert run(restarted, "again", CONVERSATION) == first
    assert restarted.cached_tokens["again"] == 6 * PAGE
    assert restarted.scheduler.kv_memory.kv_tiers.stats.pages_read == 6
    # What the rank sends /metrics, through the wire format.
    report = report_of(restarted.scheduler.control_target.stats(), True)
    serializer = restarted.to_scheduler.serializer
    sent = serializer.decode(serializer.encode(report))
    assert (sent.kv_storage_tier, sent.kv_storage_pages_read, sent.kv_storage_lookups) == ("file", 6, 1)
    assert sent.kv_storage_read_back_time.cumulative[-1] == 1


def test_a_corrupt_page_file_is_dropped_and_the_rest_computed(tiered, tmp_path, caplog):
    first = evicted_into(tiered("file", directory=tmp_path))
    restarted = tiered("file", directory=tmp_path)
    keys = restarted.scheduler.kv_memory.kv_tiers.page_keys.keys(CONVERSATION, None)
    third = tmp_path / "pages" / f"{keys[2]}.page"
    data = bytearray(third.read_bytes())
    data[len(data) // 2] ^= 0xFF
    third.write_bytes(bytes(data))
    assert run(restarted, "again", CONVERSATION) == first
    assert restarted.cached_tokens["again"] == 2 * PAGE  # the pages before the bad one
    assert not third.exists()
    assert "dropped corrupt or truncated KV page file" in caplog.text


def test_a_flush_drops_the_pool_without_writing_it_down(tiered):
    harness = tiered("host")
    run(harness, "first", CONVERSATION)
    from tercet.ipc.control_messages import FlushCacheReq
    assert harness.control(FlushCacheReq("flush")).ok
    harness.scheduler.kv_memory.kv_tiers.demotion.wait()
    assert harness.scheduler.kv_memory.kv_tiers.stats.pages_written == 0


class FailingStorage:
    persistent = False

    def get(self, key):
        raise OSError("the tier is down")

    put = contains = get


def test_a_tier_that_fails_loses_pages_never_requests(tercet_scheduler):
    from tercet.plugin_api import hookimpl

    class FailingTier:
        @hookimpl
        def register_kv_storages(self, register):
            register("failing", lambda config: FailingStorage())

    harness = tercet_scheduler([FailingTier()], ["cache.storage=failing"], max_total_tokens=16 * PAGE,
                               page_size=PAGE)
    first = run(harness, "first", CONVERSATION)
    run(harness, "other", OTHER)
    assert run(harness, "again", CONVERSATION) == first
    assert harness.scheduler.failures.as_dict()["by_kind"]["kv_storage"] > 0


def test_a_graceful_stop_writes_the_cached_prefixes_down_to_the_file_tier(tiered, tmp_path):
    stopping = tiered("file", directory=tmp_path)
    first = run(stopping, "first", CONVERSATION)  # still in the pool: nothing evicted it
    assert not list((tmp_path / "pages").iterdir())
    stopping.scheduler.before_exit()
    restarted = tiered("file", directory=tmp_path)
    assert run(restarted, "again", CONVERSATION) == first
    assert restarted.cached_tokens["again"] == 6 * PAGE


def test_a_graceful_stop_keeps_nothing_of_a_host_tier(tiered):
    stopping = tiered("host")
    run(stopping, "first", CONVERSATION)
    stopping.scheduler.before_exit()
    assert stopping.scheduler.kv_memory.prefix_cache.num_cached_pages > 0  # it did not even evict


def test_a_tier_without_the_prefix_cache_is_refused_naming_both_settings(tercet_scheduler):
    from tercet.errors import ConfigError

    with pytest.raises(ConfigError, match="cache.storage = 'host'.*cache.prefix_cache = true"):
        tercet_scheduler(settings=["cache.storage=host", "cache.prefix_cache=false"])
