"""The install step that compiles the built-in kernels, so that a first start compiles nothing.

``pip install`` runs setuptools' ``build_py``; pyproject.toml swaps in
:class:`BuildPyWithKernels`, which does the usual work and then compiles the
built-in kernels' C sources for the CPU it runs on into
``tercet/plugin_host/prebuilt_kernels/`` (in the wheel it builds, or in the
source tree for an editable install). :func:`tercet.plugin_host.native_build.load_library`
loads them from there by a name that is a digest of source, flags and CPU.

It runs before tercet is importable, so it reads the sources by their paths
and loads ``native_build.py`` by its path, and it imports nothing else of
tercet's. Installing never fails because of it: without a compiler, or with one
that fails, it says so and the kernels are built at the first start instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    from setuptools.command.build_py import build_py
except ImportError:  # a running tercet uses the functions below only (tests), and may have no setuptools
    build_py = object

# (package, C file, library name, flags beyond native_build.DEFAULT_FLAGS): the kernels the
# built-in parts load, with the same names and flags as the modules that load them (a test
# compares the two: tests/plugin_host/test_kernel_prebuild.py).
CORE_KERNELS = (
    ("tercet.model", "native_layers.c", "native_layers", ()),
    ("tercet.model", "cpu_fused_ops.c", "cpu_fused_ops", ()),
    ("tercet.model", "native_layers.c", "native_layers_f32", ("-DTERCET_FLOAT32_ACTIVATIONS",)),
    ("tercet.model", "cpu_fused_ops.c", "cpu_fused_ops_f32", ("-DTERCET_FLOAT32_ACTIVATIONS",)),
    ("tercet.plugins.linear_layers", "block_matmul.c", "block_matmul", ()),
    ("tercet.plugins.linear_layers", "few_rows_f32.c", "few_rows_f32", ()),
)
# The decode attention is compiled per shape: every shape with a fast path
# (tercet.plugins.paged_cpu_attention.build.source_for).
ATTENTION_HEAD_DIMS = (64, 128)
ATTENTION_MAX_GROUP = 8
PREBUILT_FOLDER = "prebuilt_kernels"


def built_in_kernels() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """Every kernel the install step compiles: the core ones, then each decode-attention shape."""
    attention = [
        ("tercet.plugins.paged_cpu_attention", "decode_attention.c", f"paged_decode_attention_g{group}_d{head_dim}",
         (f"-DTERCET_ATTEND_GROUP={group}", f"-DTERCET_ATTEND_HEAD_DIM={head_dim}"))
        for head_dim in ATTENTION_HEAD_DIMS for group in range(1, ATTENTION_MAX_GROUP + 1)
    ]
    return [*CORE_KERNELS, *attention]


class BuildPyWithKernels(build_py):
    """setuptools' ``build_py``, then the built-in kernels compiled for this CPU."""

    def run(self) -> None:
        super().run()
        plugin_host = Path(self.get_package_dir("tercet.plugin_host"))
        # An editable install runs the sources where they are; a wheel carries what build_lib holds.
        target = (plugin_host if self.editable_mode else Path(self.build_lib) / "tercet" / "plugin_host") / PREBUILT_FOLDER
        native_build = _load_native_build(plugin_host / "native_build.py")
        prebuild(native_build, self.get_package_dir, plugin_host / "native_include", target)


def prebuild(native_build, package_dir, include_dir: Path, target: Path) -> list[Path]:
    """Compile :func:`built_in_kernels` into ``target`` (emptied first); returns the libraries built.

    ``package_dir(package)`` is the folder of a package's sources. A kernel that fails is reported
    and skipped: it is built at the first start that needs it."""
    try:
        native_build.compiler()
    except native_build.NativeBuildError as error:
        _say(f"the kernels are not compiled now ({error}); the first start compiles the ones it needs")
        return []
    shutil.rmtree(target, ignore_errors=True)  # libraries of sources that have changed since
    kernels = built_in_kernels()
    _say(f"compiling {len(kernels)} kernels for this CPU into {target}")

    def build(kernel) -> Path | None:
        package, file_name, library_name, extra_flags = kernel
        c_file = Path(package_dir(package)) / file_name
        flags = (*native_build.DEFAULT_FLAGS, *extra_flags)
        text = native_build.source_text(c_file.read_bytes(), include_dir)
        try:
            return native_build.compile_c(
                c_file, include_dir, flags, target / native_build.prebuilt_name(library_name, text, flags)
            )
        except (native_build.NativeBuildError, OSError) as error:
            _say(f"{library_name} is not compiled now ({error}); the first start that needs it compiles it")
            return None

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        built = [path for path in pool.map(build, kernels) if path is not None]
    _say(f"compiled {len(built)} of {len(kernels)} kernels")
    return built


def _load_native_build(path: Path):
    name = "tercet_native_build_at_install"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def _say(message: str) -> None:
    print(f"tercet: {message}", file=sys.stderr, flush=True)
