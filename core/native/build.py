"""C sources that ship in a plugin's package, compiled once per machine and level and loaded with ctypes.

A plugin with a kernel in C ships the source, not a binary: the first process
that needs it compiles it with the system's C compiler (``-O3 -fopenmp`` and the
flags of the instruction-set level in use, :mod:`tercet.native.cpu`: AVX2's on an
AVX2 machine, AVX-512's on a Zen 4) into tercet's cache, under a name that is the
level and a digest of the source (with its package's headers and tercet's), the
flags and the compiler. A later start, or another process of the same server,
loads what is there. Several processes compiling at once each write their own file and
rename it into place: the first rename wins, and every one of them loads a
whole library.

No compiler, or one that fails, is a :class:`NativeBuildError` with the reason,
so that the plugin can fall back to something slower and say why.

The built-in kernels are also compiled when tercet is installed
(:mod:`tercet.native.prebuild`), for every level of the machine's architecture
that the compiler can target, into ``prebuilt_kernels/`` next to this module,
under the level and a digest of the source and the flags: a first start then
compiles nothing, and a wheel built on one x86 machine carries the libraries of
every x86 level. A library found there is loaded before the cache is looked at;
a source or flags changed since give another name, which is not there, and the
cache's build follows.

This module imports nothing of tercet's at its top: the install step loads it
by its path, before tercet is importable.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# The level in use adds its own flags (-march=x86-64-v3 …); never -march=native, so that a library
# runs on every CPU of its level.
DEFAULT_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c11")
# tercet's headers for kernels (tercet_bfloat16.h), on every build's include path.
INCLUDE_DIR = ("tercet.native", "include")


# Where the install step puts the libraries it built (kernel_prebuild.py).
PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt_kernels"


def _include_dir():
    package, folder = INCLUDE_DIR
    return resources.files(package).joinpath(folder)


COMPILE_TIMEOUT_S = 120


class NativeBuildError(RuntimeError):
    """The library cannot be built or loaded here; the message says why."""


@dataclass(frozen=True)
class NativeSource:
    """A C file in ``package`` (``file_name``), built into a library named after ``library_name``.

    ``flags`` come before the level's own; the headers (``*.h``) beside the C file are part of the
    source (a kernel's code for one level may live in a header of its own)."""

    package: str
    file_name: str
    library_name: str
    flags: tuple[str, ...] = DEFAULT_FLAGS

    def text(self) -> bytes:
        """The source, its package's headers and tercet's: what the build reads."""
        folder = resources.files(self.package)
        return source_text(folder.joinpath(self.file_name).read_bytes(), _include_dir(), folder)


def source_text(c_source: bytes, *include_dirs) -> bytes:
    """A C file's bytes and those of the headers in ``include_dirs`` (paths or resource folders)."""
    headers = sorted(
        (entry.name, entry.read_bytes()) for folder in include_dirs for entry in folder.iterdir()
        if entry.name.endswith(".h")
    )
    return c_source + repr(headers).encode()


def compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``, ``gcc`` or ``clang``, whichever is found first."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise NativeBuildError("no C compiler found (set CC, or install gcc)")


@functools.cache
def _compiler_version(cc: str) -> str:
    # Once per process: a scheduler loads several libraries at start-up.
    return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout


def _level(level):
    """``level``, or the level in use where it is None."""
    if level is not None:
        return level
    from tercet.native.cpu import level_in_use

    return level_in_use()


def library_path(source: NativeSource, cache_dir: Path | None = None, level=None) -> Path:
    """Where the library of this source, these flags, this compiler and ``level`` (default: the level
    in use) lives in the cache."""
    if cache_dir is None:
        from tercet.formats.default_model import default_cache_dir

        cache_dir = default_cache_dir()
    level = _level(level)
    key = source.text() + " ".join((*source.flags, *level.flags)).encode() + _compiler_version(compiler()).encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    return Path(cache_dir) / "kernels" / f"{source.library_name}-{level.name}-{digest}.so"


def prebuilt_name(library_name: str, level_name: str, text: bytes, flags: tuple[str, ...]) -> str:
    """The file name the install step gives the library of ``text`` built with ``flags`` (the level's
    included) for the level ``level_name``.

    No compiler version in it: the library is already built, and a machine that runs it may have
    no compiler at all."""
    key = text + " ".join(flags).encode()
    return f"{library_name}-{level_name}-{hashlib.sha256(key).hexdigest()[:16]}.so"


def prebuilt_path(source: NativeSource, level=None) -> Path:
    """Where the library of ``source`` at ``level`` (default: the level in use) is when the install step built it."""
    level = _level(level)
    return PREBUILT_DIR / prebuilt_name(source.library_name, level.name, source.text(), (*source.flags, *level.flags))


def build_library(source: NativeSource, target: Path, level=None) -> Path:
    """Compile ``source`` at ``level`` (default: the level in use) into ``target`` (atomically); returns ``target``."""
    level = _level(level)
    with (
        resources.as_file(resources.files(source.package).joinpath(source.file_name)) as path,
        resources.as_file(_include_dir()) as include,
    ):
        return compile_c(Path(path), Path(include), (*source.flags, *level.flags), target)


def compile_c(c_file: Path, include_dir: Path, flags: tuple[str, ...], target: Path) -> Path:
    """Compile ``c_file`` with ``flags`` into ``target``, written whole or not at all; returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=target.parent)
    os.close(handle)
    try:
        compiled = subprocess.run(
            [compiler(), *flags, "-I", str(include_dir), "-o", partial, str(c_file), "-lm"],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
        )
        if compiled.returncode != 0:
            raise NativeBuildError(f"compiling {c_file.name} failed: {compiled.stderr.strip()[-2000:]}")
        os.replace(partial, target)
    except subprocess.TimeoutExpired:
        raise NativeBuildError(f"compiling {c_file.name} took over {COMPILE_TIMEOUT_S} s") from None
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


_BUILD_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _build_lock(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _BUILD_LOCKS.setdefault(path, threading.Lock())


def load_library(source: NativeSource, cache_dir: Path | None = None, prebuilt: bool = True,
                 level=None) -> ctypes.CDLL:
    """The library of ``source`` at ``level`` (an :class:`~tercet.native.levels.IsaLevel`; default: the
    level in use, :func:`tercet.native.cpu.level_in_use`), built first if this machine has no copy yet.

    Threads of one process asking for the same library wait for one build (a model runner
    builds some kernels ahead, on a thread, while its weights load). A library the install step
    built is loaded as it is (``prebuilt=False`` skips it: the tests of the build)."""
    level = _level(level)
    try:
        if prebuilt:
            built_at_install = prebuilt_path(source, level)
            if built_at_install.exists():
                return ctypes.CDLL(str(built_at_install))
        path = library_path(source, cache_dir, level)
        with _build_lock(path):
            if not path.exists():
                build_library(source, path, level)
        return ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as error:
        raise NativeBuildError(f"{source.file_name} cannot be built or loaded: {error}") from None
