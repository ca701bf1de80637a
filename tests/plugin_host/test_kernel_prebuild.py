"""The install step's kernels: the names the runtime looks for, built where it looks, and never a failed install."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tercet.model.fused_ops as fused_ops
import tercet.model.native_layers as native_layers
import tercet.plugins.linear_layers.block_matmul as block_matmul
import tercet.plugins.linear_layers.few_rows_f32 as few_rows_f32
from tercet.plugin_api import AttentionLayout
from tercet.plugin_host import kernel_prebuild, native_build
from tercet.plugins.paged_cpu_attention import build as attention_build

CORE_DIR = Path(native_build.__file__).parents[1]
PLUGINS_DIR = Path(block_matmul.__file__).parents[1]


def _package_dir(package: str) -> Path:
    """Where a package's sources are, as pyproject.toml's package-dir maps them."""
    base, prefix = (PLUGINS_DIR, "tercet.plugins") if package.startswith("tercet.plugins") else (CORE_DIR, "tercet")
    return base.joinpath(*[part for part in package[len(prefix):].split(".") if part])


def _install_names() -> set[str]:
    include = Path(native_build.__file__).parent / "native_include"
    names = set()
    for package, file_name, library_name, extra_flags in kernel_prebuild.built_in_kernels():
        text = native_build.source_text((_package_dir(package) / file_name).read_bytes(), include)
        names.add(native_build.prebuilt_name(library_name, text, (*native_build.DEFAULT_FLAGS, *extra_flags)))
    return names


def _runtime_sources() -> list[native_build.NativeSource]:
    attention = [
        attention_build.source_for(AttentionLayout(group * 2, 2, head_dim, 1, "cpu", None))
        for head_dim in attention_build.SPECIALIZED_HEAD_DIMS
        for group in range(1, attention_build.MAX_SPECIALIZED_GROUP + 1)
    ]
    return [native_layers.SOURCE, fused_ops.SOURCE, native_layers.FLOAT32_SOURCE, fused_ops.FLOAT32_SOURCE,
            block_matmul.SOURCE, few_rows_f32.SOURCE, *attention]


def test_the_install_step_builds_every_kernel_the_runtime_loads_under_the_name_it_looks_for():
    runtime_names = {native_build.prebuilt_path(source).name for source in _runtime_sources()}
    assert len(runtime_names) == 6 + 16  # one per core kernel, one per attention shape
    assert runtime_names == _install_names()


def test_a_changed_source_or_flag_has_another_name_so_a_stale_library_is_never_loaded():
    source = native_layers.SOURCE
    here = native_build.prebuilt_path(source).name
    assert native_build.prebuilt_path(dataclasses.replace(source, flags=(*source.flags, "-DX"))).name != here
    text = source.text()
    assert native_build.prebuilt_name(source.library_name, text + b"/* edited */", source.flags) != here


@pytest.fixture
def one_kernel(monkeypatch, tmp_path):
    """The install step cut down to the quickest kernel, building into ``tmp_path / "prebuilt"``."""
    monkeypatch.setattr(kernel_prebuild, "built_in_kernels", lambda: [kernel_prebuild.CORE_KERNELS[0]])
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path / "prebuilt")
    return tmp_path / "prebuilt"


def test_a_library_built_at_install_is_loaded_and_nothing_is_compiled_into_the_cache(one_kernel, tmp_path):
    include = Path(native_build.__file__).parent / "native_include"
    built = kernel_prebuild.prebuild(native_build, _package_dir, include, one_kernel)
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
    include = Path(native_build.__file__).parent / "native_include"
    assert kernel_prebuild.prebuild(native_build, _package_dir, include, one_kernel) == []
    assert "the first start compiles the ones it needs" in capsys.readouterr().err
    assert not one_kernel.exists()


def test_a_kernel_that_fails_to_compile_is_skipped_and_the_others_are_built(one_kernel, monkeypatch, capsys):
    broken = ("tercet.model", "native_layers.c", "broken", ("-fno-such-flag",))
    monkeypatch.setattr(kernel_prebuild, "built_in_kernels", lambda: [broken, kernel_prebuild.CORE_KERNELS[0]])
    include = Path(native_build.__file__).parent / "native_include"
    built = kernel_prebuild.prebuild(native_build, _package_dir, include, one_kernel)
    assert [path.name.split("-")[0] for path in built] == ["native_layers"]
    assert "broken is not compiled now" in capsys.readouterr().err
