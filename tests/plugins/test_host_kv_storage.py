"""The host tier: its byte budget, least recently used out first, and its registration."""

from tercet.config import load_config, parse_set_options
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.host_kv_storage import HostKVStorage


def test_it_keeps_what_is_put_until_the_budget_needs_room_oldest_use_first():
    storage = HostKVStorage(budget_bytes=30)
    for key in "abc":
        storage.put(key, key.encode() * 10)
    assert storage.num_bytes == 30 and all(storage.contains(key) for key in "abc")
    assert storage.get("a") == b"a" * 10  # a is now the most recently used
    storage.put("d", b"d" * 10)
    assert not storage.contains("b") and storage.get("b") is None
    assert [storage.contains(key) for key in "acd"] == [True, True, True]
    assert storage.num_bytes == 30


def test_replacing_a_key_counts_its_bytes_once_and_a_page_over_the_budget_is_not_kept():
    storage = HostKVStorage(budget_bytes=10)
    storage.put("a", b"12345")
    storage.put("a", b"123")
    assert storage.num_bytes == 3 and storage.get("a") == b"123"
    storage.put("huge", b"x" * 11)
    assert not storage.contains("huge") and storage.contains("a")
    storage.discard("a")
    assert storage.num_bytes == 0 and storage.get("a") is None


def test_it_is_chosen_by_cache_storage_with_host_bytes_as_its_budget():
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    config = load_config(environ={}, overrides=parse_set_options(["cache.storage=host", "cache.host_bytes=2MiB"]))
    assert registries.kv_storages.entries["host"].plugin_name == "host_kv_storage"
    storage = registries.chosen("kv_storages", config)(config)
    assert isinstance(storage, HostKVStorage) and storage.budget_bytes == 2 * 2**20 and not storage.persistent
