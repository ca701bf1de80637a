"""The file tier: a byte budget over the whole directory, LRU by use, surviving a restart, shared by two
servers, and never serving a truncated or corrupt file."""

from __future__ import annotations

import os
import threading

import pytest

from tercet.config import load_config, parse_set_options
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.file_kv_storage import FileKVStorage

PAGE = 1000  # bytes of each page's data; a file adds its frame (under 50 bytes)


def key(index: int) -> str:
    return f"{index:064x}"


def data(index: int) -> bytes:
    return bytes([index % 256]) * PAGE


def age(storage: FileKVStorage, index: int, seconds_ago: float) -> None:
    """Make a page look last used ``seconds_ago`` (its mtime is the directory's LRU order)."""
    path = storage.path_of(key(index))
    stamp = path.stat().st_mtime - seconds_ago
    os.utime(path, (stamp, stamp))


def test_what_is_put_is_got_back_and_survives_a_new_instance(tmp_path):
    storage = FileKVStorage(tmp_path, budget_bytes=10 * PAGE)
    storage.put(key(1), data(1))
    assert storage.contains(key(1)) and storage.get(key(1)) == data(1)
    assert not storage.contains(key(2)) and storage.get(key(2)) is None
    restarted = FileKVStorage(tmp_path, budget_bytes=10 * PAGE)
    assert restarted.contains(key(1)) and restarted.get(key(1)) == data(1)
    assert restarted.num_bytes == storage.num_bytes > PAGE
    assert restarted.persistent


def test_over_its_budget_it_deletes_the_least_recently_used_pages(tmp_path):
    storage = FileKVStorage(tmp_path, budget_bytes=int(3.5 * PAGE))
    for index in range(3):
        storage.put(key(index), data(index))
        age(storage, index, 100 - index)  # 0 oldest
    assert storage.get(key(0)) == data(0)  # a read makes it the most recently used
    storage.put(key(3), data(3))
    assert [storage.contains(key(index)) for index in range(4)] == [True, False, True, True]
    assert not storage.path_of(key(1)).exists()
    assert storage.num_bytes <= 3.5 * PAGE


def test_two_instances_on_one_directory_share_pages_and_one_budget(tmp_path):
    # rescan_seconds=0: each looks at the whole directory at every write (by default every few seconds).
    first = FileKVStorage(tmp_path, budget_bytes=int(3.5 * PAGE), rescan_seconds=0)
    second = FileKVStorage(tmp_path, budget_bytes=int(3.5 * PAGE), rescan_seconds=0)
    first.put(key(1), data(1))
    age(first, 1, 100)
    assert second.contains(key(1)) and second.get(key(1)) == data(1)  # written by the other
    second.discard(key(1))
    assert first.get(key(1)) is None and not first.contains(key(1))  # deleted by the other: a miss
    for index in range(2, 5):
        (first if index % 2 else second).put(key(index), data(index))
        age(first, index, 50 - index)
    second.put(key(5), data(5))  # the directory holds 4 pages now: the oldest of either goes
    on_disk = sorted(path.name for path in (tmp_path / "pages").iterdir())
    assert len(on_disk) == 3 and f"{key(2)}.page" not in on_disk


def test_concurrent_writers_and_readers_never_see_half_a_file(tmp_path):
    first = FileKVStorage(tmp_path, budget_bytes=4 * PAGE)
    second = FileKVStorage(tmp_path, budget_bytes=4 * PAGE)
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            for index in range(8):
                got = second.get(key(index))
                if got is not None:
                    seen.append(got == data(index))

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(20):
        for index in range(8):
            first.put(key(index), data(index))
    stop.set()
    reader.join()
    assert seen and all(seen)
    assert not [path for path in (tmp_path / "pages").iterdir() if path.name.startswith(".tmp-")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_corrupt_or_truncated_file_is_dropped_with_a_log_line_and_never_served(tmp_path, caplog, damage):
    storage = FileKVStorage(tmp_path, budget_bytes=10 * PAGE)
    storage.put(key(1), data(1))
    path = storage.path_of(key(1))
    framed = bytearray(path.read_bytes())
    if damage == "truncate":
        framed = framed[:-10]
    elif damage == "flip":
        framed[-5] ^= 0x01
    else:
        framed = bytearray()
    path.write_bytes(bytes(framed))
    assert storage.get(key(1)) is None
    assert not path.exists() and not storage.contains(key(1))
    assert "dropped corrupt or truncated KV page file" in caplog.text


def test_a_key_that_is_not_hex_is_never_a_path(tmp_path):
    storage = FileKVStorage(tmp_path, budget_bytes=10 * PAGE)
    with pytest.raises(ValueError):
        storage.put("../escape", b"x")
    assert not (tmp_path / "escape.page").exists()


def test_it_is_chosen_by_cache_storage_in_file_dir_with_file_bytes(tmp_path):
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    config = load_config(environ={}, overrides=parse_set_options(
        ["cache.storage=file", f"cache.file_dir={tmp_path}", "cache.file_bytes=5MB"]))
    storage = registries.chosen("kv_storages", config)(config)
    assert isinstance(storage, FileKVStorage)
    assert storage.budget_bytes == 5 * 10**6 and storage.directory == tmp_path / "pages"
