"""Plugins' C sources built once per machine and level into the cache, and what happens when that fails."""

from __future__ import annotations

import dataclasses

import pytest

from tercet.native.build import NativeBuildError, NativeSource, build_library, library_path, load_library
from tercet.native.cpu import level_in_use, runnable_levels
from tercet.native.levels import PORTABLE

SOURCE = NativeSource("tercet.plugins.paged_cpu_attention", "decode_attention.c", "paged_decode_attention")


def test_a_library_is_built_once_and_then_loaded_from_the_cache(tmp_path):
    library = load_library(SOURCE, tmp_path)
    built = library_path(SOURCE, tmp_path)
    assert built.exists() and built.parent == tmp_path / "kernels"
    modified = built.stat().st_mtime_ns
    assert load_library(SOURCE, tmp_path).tercet_paged_decode_attention is not None
    assert built.stat().st_mtime_ns == modified and library is not None


def test_a_compile_error_is_reported_with_the_compiler_output(tmp_path):
    broken = dataclasses.replace(SOURCE, flags=("-fno-such-flag",))
    with pytest.raises(NativeBuildError, match="compiling decode_attention.c failed"):
        build_library(broken, tmp_path / "kernel.so")
    assert list(tmp_path.iterdir()) == []  # no partial file is left behind


def test_the_library_is_kept_per_level_and_per_flags(tmp_path):
    here = library_path(SOURCE, tmp_path)
    assert here.name.startswith(f"paged_decode_attention-{level_in_use().name}-")
    assert library_path(dataclasses.replace(SOURCE, flags=(*SOURCE.flags, "-DX")), tmp_path) != here
    assert library_path(SOURCE, tmp_path, PORTABLE).name.startswith("paged_decode_attention-portable-")


@pytest.mark.parametrize("level", runnable_levels(), ids=lambda level: level.name)
def test_every_level_this_cpu_runs_builds_and_loads(level, tmp_path):
    library = load_library(SOURCE, tmp_path, prebuilt=False, level=level)
    assert library.tercet_paged_decode_attention is not None
    assert library_path(SOURCE, tmp_path, level).exists()


def test_a_levels_flags_reach_the_compiler(tmp_path):
    """The portable build has no AVX-512 code, whatever this CPU is (the flags, not -march=native, decide)."""
    library = load_library(NativeSource("tercet.plugins.linear_layers", "block_matmul.c", "block_matmul"), tmp_path,
                           prebuilt=False, level=PORTABLE)
    assert library.tercet_block_matmul_vectorized() == 0


def test_without_a_compiler_the_error_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NativeBuildError, match="no C compiler found"):
        load_library(SOURCE, tmp_path)
