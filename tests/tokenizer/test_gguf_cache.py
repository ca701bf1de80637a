"""GGUF tokenizers are converted once per file version and then loaded from the cache."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from small_gguf import write_gguf

from tercet.tokenizer import from_gguf
from tercet.tokenizer.gguf_cache import CACHE_SUBDIR, cache_key, find_cached_tokenizer, store_cached_tokenizer
from tercet.tokenizer.loading import load_tokenizer


@pytest.fixture
def gguf_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TERCET_CACHE_DIR", str(tmp_path / "cache"))
    return write_gguf(tmp_path / "m.gguf", add_bos=True)


def count_conversions(monkeypatch) -> list:
    conversions = []
    convert = from_gguf.tokenizer_files

    def counted(path):
        conversions.append(path)
        return convert(path)

    monkeypatch.setattr(from_gguf, "tokenizer_files", counted)
    return conversions


def test_a_gguf_is_converted_once_then_loaded_from_the_cache(gguf_path, tmp_path, monkeypatch):
    in_memory = from_gguf.tokenizer_from_files(from_gguf.tokenizer_files(gguf_path), str(gguf_path))
    conversions = count_conversions(monkeypatch)
    first = load_tokenizer(str(gguf_path))
    second = load_tokenizer(str(gguf_path))
    assert len(conversions) == 1
    for loaded in (first, second):  # the cached entry gives the very tokenizer the conversion gives
        assert loaded.backend_tokenizer.to_str() == in_memory.backend_tokenizer.to_str()
        assert (loaded.special_tokens, loaded.chat_template) == (in_memory.special_tokens, in_memory.chat_template)
        assert loaded.all_special_ids == in_memory.all_special_ids
    (entry,) = (tmp_path / "cache" / CACHE_SUBDIR).iterdir()  # no staging directory left behind
    assert sorted(path.name for path in entry.iterdir()) == ["chat_template.jinja", "tokenizer.json",
                                                             "tokenizer_config.json"]


def test_a_changed_file_is_converted_again(gguf_path, monkeypatch):
    conversions = count_conversions(monkeypatch)
    load_tokenizer(str(gguf_path))
    key = cache_key(gguf_path)
    stat = gguf_path.stat()
    os.utime(gguf_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert cache_key(gguf_path) != key
    load_tokenizer(str(gguf_path))
    assert len(conversions) == 2


def test_an_entry_another_process_wrote_first_is_used(gguf_path, tmp_path):
    files = from_gguf.tokenizer_files(gguf_path)
    first = store_cached_tokenizer(gguf_path, files)
    # A second process finishing its conversion later finds the entry in place.
    assert store_cached_tokenizer(gguf_path, {**files, "tokenizer_config.json": "{}"}) == first
    assert (first / "tokenizer_config.json").read_text() == files["tokenizer_config.json"]
    assert find_cached_tokenizer(gguf_path) == first
    assert len(list((tmp_path / "cache" / CACHE_SUBDIR).iterdir())) == 1


def test_an_unwritable_cache_still_gives_the_tokenizer(gguf_path, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TERCET_CACHE_DIR", str(blocker))
    tokenizer = load_tokenizer(str(gguf_path))
    assert tokenizer.encode("ab") == [1, 8]
    assert "cannot cache the tokenizer" in caplog.text


def test_processes_starting_together_convert_once_the_others_wait_for_the_entry(gguf_path, monkeypatch):
    from tercet.tokenizer import gguf_cache

    conversions, looked_up = [], threading.Event()
    convert, find = from_gguf.tokenizer_files, gguf_cache.find_cached_tokenizer

    def find_and_tell(path, cache_dir=None):
        if conversions:  # the second loader has looked while the first converts
            looked_up.set()
        return find(path, cache_dir)

    def slow_conversion(path):
        conversions.append(path)
        assert looked_up.wait(timeout=60), "the second loader never looked at the cache"
        return convert(path)

    monkeypatch.setattr(gguf_cache, "find_cached_tokenizer", find_and_tell)
    monkeypatch.setattr(from_gguf, "tokenizer_files", slow_conversion)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(load_tokenizer, str(gguf_path))
        # The second starts once the first is converting, and finds no entry yet.
        while not conversions:
            threading.Event().wait(0.01)
        second = pool.submit(load_tokenizer, str(gguf_path))
        tokenizers = [first.result(timeout=120), second.result(timeout=120)]
    assert len(conversions) == 1
    assert tokenizers[0].backend_tokenizer.to_str() == tokenizers[1].backend_tokenizer.to_str()
