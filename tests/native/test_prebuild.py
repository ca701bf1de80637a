"""The install step's kernels: the names the runtime looks for, built where it looks, and never a failed install."""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path

import pytest

import tercet.model.fused_ops as fused_ops
import tercet.model.native_layers as native_layers
import tercet.plugins.linear_layers.block_matmul as block_matmul
import tercet.plugins.linear_layers.few_rows_f32 as few_rows_f32
from tercet.plugin_api import AttentionLayout
from tercet.native import build as native_build
from tercet.native import prebuild as kernel_prebuild
from tercet.native.cpu import level_in_use, runnable_levels
from tercet.native.levels import PORTABLE, levels_of
from tercet.plugins.paged_cpu_attention import build as attention_build

CORE_DIR = Path(native_build.__file__).parents[1]
PLUGINS_DIR = Path(block_matmul.__file__).parents[1]


def _package_dir(package: str) -> Path:
    """Where a package's sources are, as pyproject.toml's package-dir maps them."""
    base, prefix = (PLUGINS_DIR, "tercet.plugins") if package.startswith("tercet.plugins") else (CORE_DIR, "tercet")
    return base.joinpath(*[part for part in package[len(prefix):].split(".") if part])


INCLUDE = Path(native_build.__file__).parent / "include"


def _install_names(level) -> set[str]:
    names = set()
    for package, file_name, library_name, extra_flags in kernel_prebuild.built_in_kernels():
        c_file = _package_dir(package) / file_name
        text = native_build.source_text(c_file.read_bytes(), INCLUDE, c_file.parent)
        flags = (*native_build.DEFAULT_FLAGS, *extra_flags, *level.flags)
        names.add(native_build.prebuilt_name(library_name, level.name, text, flags))
    return names


def _runtime_sources() -> list[native_build.NativeSource]:
    attention = [
        attention_build.source_for(AttentionLayout(group * 2, 2, head_dim, 1, "cpu", None))
        for head_dim in attention_build.SPECIALIZED_HEAD_DIMS
        for group in range(1, attention_build.MAX_SPECIALIZED_GROUP + 1)
    ]
    return [native_layers.SOURCE, fused_ops.SOURCE, native_layers.FLOAT32_SOURCE, fused_ops.FLOAT32_SOURCE,
            block_matmul.SOURCE, few_rows_f32.SOURCE, *attention]


@pytest.mark.parametrize("level", runnable_levels(), ids=lambda level: level.name)
def test_the_install_step_builds_every_kernel_the_runtime_loads_under_the_name_it_looks_for(level):
    runtime_names = {native_build.prebuilt_path(source, level).name for source in _runtime_sources()}
    assert len(runtime_names) == 6 + 16  # one per core kernel, one per attention shape
    assert runtime_names == _install_names(level)


def test_a_changed_source_or_flag_has_another_name_so_a_stale_library_is_never_loaded():
    source = native_layers.SOURCE
    here = native_build.prebuilt_path(source).name
    assert native_build.prebuilt_path(dataclasses.replace(source, flags=(*source.flags, "-DX"))).name != here
    level = level_in_use()
    flags = (*source.flags, *level.flags)
    assert native_build.prebuilt_name(source.library_name, level.name, source.text(), flags) == here
    assert native_build.prebuilt_name(source.library_name, level.name, source.text() + b"/* edited */", flags) != here


@pytest.fixture
def one_kernel(monkeypatch, tmp_path):
    """The install step cut down to the quickest kernel, building into ``tmp_path / "prebuilt"``."""
    monkeypatch.setattr(kernel_prebuild, "built_in_kernels", lambda: [kernel_prebuild.CORE_KERNELS[0]])
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path / "prebuilt")
    return tmp_path / "prebuilt"


def test_a_library_built_at_install_is_loaded_and_nothing_is_compiled_into_the_cache(one_kernel, tmp_path):
    built = kernel_prebuild.prebuild(native_build, _package_dir, INCLUDE, one_kernel, [level_in_use()])
    assert [path.name for path in built] == [native_build.prebuilt_path(native_layers.SOURCE).name]
    cache = tmp_path / "cache"
    assert native_build.load_library(native_layers.SOURCE, cache).tercet_run_layers is not None
    assert not cache.exists()  # loaded from the install step's folder: no build, no cache entry
    # Without the install step's library, the first load compiles into the cache as before.
    assert native_build.load_library(native_layers.SOURCE, cache, prebuilt=False).tercet_run_layers is not None
    assert native_build.library_path(native_layers.SOURCE, cache).exists()


def test_installing_without_a_compiler_builds_nothing_and_says_so(one_kernel, monkeypatch, capsys):
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    assert kernel_prebuild.prebuild(native_build, _package_dir, INCLUDE, one_kernel, [level_in_use()]) == []
    assert "the first start compiles the ones it needs" in capsys.readouterr().err
    assert not one_kernel.exists()


def test_a_kernel_that_fails_to_compile_is_skipped_and_the_others_are_built(one_kernel, monkeypatch, capsys):
    broken = ("tercet.model", "native_layers.c", "broken", ("-fno-such-flag",))
    monkeypatch.setattr(kernel_prebuild, "built_in_kernels", lambda: [broken, kernel_prebuild.CORE_KERNELS[0]])
    built = kernel_prebuild.prebuild(native_build, _package_dir, INCLUDE, one_kernel, [level_in_use()])
    assert [path.name.split("-")[0] for path in built] == ["native_layers"]
    assert "broken (" in capsys.readouterr().err


def test_every_level_of_the_architecture_is_built_not_only_this_cpus(one_kernel):
    """A wheel built here carries every level of its architecture, those this CPU lacks included."""
    levels = levels_of(platform.machine())
    built = kernel_prebuild.prebuild(native_build, _package_dir, INCLUDE, one_kernel, levels)
    assert sorted(path.name.split("-")[1] for path in built) == sorted(level.name for level in levels)


def test_a_level_the_compiler_cannot_target_is_skipped_with_one_line(one_kernel, capsys):
    unknown = dataclasses.replace(PORTABLE, name="imaginary", flags=("-mno-such-isa-flag",))
    built = kernel_prebuild.prebuild(native_build, _package_dir, INCLUDE, one_kernel, [unknown, PORTABLE])
    assert [path.name.split("-")[1] for path in built] == ["portable"]
    assert "level imaginary is not compiled" in capsys.readouterr().err
