"""The install step that compiles the built-in kernels, so that a first start compiles nothing.

``pip install`` runs setuptools' ``build_py``; pyproject.toml swaps in
:class:`BuildPyWithKernels`, which does the usual work and then compiles the
built-in kernels' C sources for every instruction-set level of the machine's
architecture that the compiler can target (:mod:`tercet.native.levels`: on x86
the portable, AVX2, AVX-512 and AMX builds, whatever this CPU runs) into
``tercet/native/prebuilt_kernels/`` (in the wheel it builds, or in the source
tree for an editable install). :func:`tercet.native.build.load_library` loads
the level in use from there by a name that is the level and a digest of source
and flags, so a wheel serves any CPU of its architecture without a compiler.

It runs before tercet is importable, so it reads the sources by their paths
and loads ``build.py`` and ``levels.py`` by their paths, and it imports nothing
else of tercet's. Installing never fails because of it: without a compiler, or with one
that fails, it says so and the kernels are built at the first start instead.
"""

from __future__ import annotations

import importlib.util
import os
import platform
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
        native = Path(self.get_package_dir("tercet.native"))
        # An editable install runs the sources where they are; a wheel carries what build_lib holds.
        target = (native if self.editable_mode else Path(self.build_lib) / "tercet" / "native") / PREBUILT_FOLDER
        native_build = _load_by_path(native / "build.py", "tercet_native_build_at_install")
        levels = _load_by_path(native / "levels.py", "tercet_native_levels_at_install")
        prebuild(native_build, self.get_package_dir, native / "include", target,
                 levels.levels_of(platform.machine()))


def prebuild(native_build, package_dir, include_dir: Path, target: Path, levels) -> list[Path]:
    """Compile :func:`built_in_kernels` at each of ``levels`` into ``target`` (emptied first); returns
    the libraries built.

    ``package_dir(package)`` is the folder of a package's sources. A level whose flags the compiler
    does not take is skipped with one line (its CPUs then compile at their first start, or run a
    lower level's libraries where forced); a kernel that fails is reported and skipped: it is built
    at the first start that needs it."""
    try:
        native_build.compiler()
    except native_build.NativeBuildError as error:
        _say(f"the kernels are not compiled now ({error}); the first start compiles the ones it needs")
        return []
    shutil.rmtree(target, ignore_errors=True)  # libraries of sources that have changed since
    levels = [level for level in levels if _compiler_targets(native_build, level, target)]
    kernels = [(kernel, level) for level in levels for kernel in built_in_kernels()]
    _say(f"compiling {len(kernels)} kernels ({len(built_in_kernels())} at each of the levels "
         f"{', '.join(level.name for level in levels)}) into {target}")

    def build(kernel_at_level) -> Path | None:
        (package, file_name, library_name, extra_flags), level = kernel_at_level
        c_file = Path(package_dir(package)) / file_name
        flags = (*native_build.DEFAULT_FLAGS, *extra_flags, *level.flags)
        text = native_build.source_text(c_file.read_bytes(), include_dir, c_file.parent)
        try:
            return native_build.compile_c(
                c_file, include_dir, flags, target / native_build.prebuilt_name(library_name, level.name, text, flags)
            )
        except (native_build.NativeBuildError, OSError) as error:
            _say(f"{library_name} ({level.name}) is not compiled now ({error}); the first start that needs it "
                 "compiles it")
            return None

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        built = [path for path in pool.map(build, kernels) if path is not None]
    _say(f"compiled {len(built)} of {len(kernels)} kernels")
    return built


def _compiler_targets(native_build, level, target: Path) -> bool:
    """Whether the compiler takes ``level``'s flags (a one-line C file built with them); says so when not."""
    probe = target / f".probe-{level.name}"
    probe.mkdir(parents=True, exist_ok=True)
    c_file = probe / "probe.c"
    c_file.write_text("int tercet_probe(int x) { return x + 1; }\n")
    try:
        native_build.compile_c(c_file, probe, (*native_build.DEFAULT_FLAGS, *level.flags), probe / "probe.so")
        return True
    except (native_build.NativeBuildError, OSError) as error:
        _say(f"level {level.name} is not compiled: the compiler does not take {' '.join(level.flags)} "
             f"({str(error)[-200:]})")
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _load_by_path(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def _say(message: str) -> None:
    print(f"tercet: {message}", file=sys.stderr, flush=True)
