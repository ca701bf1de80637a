"""C sources that ship in a plugin's package, compiled once per machine and loaded with ctypes.

A plugin with a kernel in C ships the source, not a binary: the first process
that needs it compiles it with the system's C compiler (by default
``-O3 -march=native -fopenmp``: built for the CPU it runs on) into tercet's
cache, under a name that is a digest of the source, the flags, the compiler and
the CPU. A later start, or another process of the same server, loads what is
there. Several processes compiling at once each write their own file and
rename it into place: the first rename wins, and every one of them loads a
whole library.

No compiler, or one that fails, is a :class:`NativeBuildError` with the reason,
so that the plugin can fall back to something slower and say why.

The built-in kernels are also compiled when tercet is installed
(:mod:`tercet.plugin_host.kernel_prebuild`), into ``prebuilt_kernels/`` next to
this module, under a name that is a digest of the source, the flags and the
CPU: a first start then compiles nothing. A library found there is loaded
before the cache is looked at; a source or flags changed since, or another CPU,
give another name, which is not there, and the cache's build follows.

This module imports nothing of tercet's at its top: the install step loads it
by its path, before tercet is importable.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DEFAULT_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11")
# tercet's headers for kernels (tercet_bfloat16.h), on every build's include path.
INCLUDE_DIR = ("tercet.plugin_host", "native_include")


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
    """A C file in ``package`` (``file_name``), built into a library named after ``library_name``."""

    package: str
    file_name: str
    library_name: str
    flags: tuple[str, ...] = DEFAULT_FLAGS

    def text(self) -> bytes:
        """The source and tercet's headers: what the build reads."""
        return source_text(resources.files(self.package).joinpath(self.file_name).read_bytes(), _include_dir())


def source_text(c_source: bytes, include_dir) -> bytes:
    """A C file's bytes and those of the headers in ``include_dir`` (a path or a resource folder)."""
    headers = sorted((entry.name, entry.read_bytes()) for entry in include_dir.iterdir() if entry.name.endswith(".h"))
    return c_source + repr(headers).encode()


def compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``, ``gcc`` or ``clang``, whichever is found first."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise NativeBuildError("no C compiler found (set CC, or install gcc)")


def cpu_identity() -> str:
    """The CPU's model and instruction-set flags: ``-march=native`` code is only for CPUs like it,
    and a cache directory may be shared by machines that differ (a home directory over NFS)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line.strip() for line in lines if line.split(":")[0].strip() in wanted}))


@functools.cache
def _compiler_version(cc: str) -> str:
    # Once per process: a scheduler loads three libraries at start-up.
    return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout


def library_path(source: NativeSource, cache_dir: Path | None = None) -> Path:
    """Where the library of this source, these flags, this compiler and this CPU lives in the cache."""
    if cache_dir is None:
        from tercet.formats.default_model import default_cache_dir

        cache_dir = default_cache_dir()
    cc = compiler()
    key = source.text() + " ".join(source.flags).encode() + _compiler_version(cc).encode() + cpu_identity().encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    return Path(cache_dir) / "kernels" / f"{source.library_name}-{digest}.so"


def prebuilt_name(library_name: str, text: bytes, flags: tuple[str, ...]) -> str:
    """The file name the install step gives the library of ``text`` built with ``flags`` for this CPU.

    No compiler version in it: the library is already built, and a machine that runs it may have
    no compiler at all."""
    key = text + " ".join(flags).encode() + cpu_identity().encode()
    return f"{library_name}-{hashlib.sha256(key).hexdigest()[:16]}.so"


def prebuilt_path(source: NativeSource) -> Path:
    """Where the library of ``source`` is when the install step built it for this CPU."""
    return PREBUILT_DIR / prebuilt_name(source.library_name, source.text(), source.flags)


def build_library(source: NativeSource, target: Path) -> Path:
    """Compile ``source`` into ``target`` (atomically); returns ``target``."""
    with (
        resources.as_file(resources.files(source.package).joinpath(source.file_name)) as path,
        resources.as_file(_include_dir()) as include,
    ):
        return compile_c(Path(path), Path(include), source.flags, target)


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


def load_library(source: NativeSource, cache_dir: Path | None = None, prebuilt: bool = True) -> ctypes.CDLL:
    """The library of ``source``, built first if this machine has no copy yet.

    Threads of one process asking for the same library wait for one build (a model runner
    builds some kernels ahead, on a thread, while its weights load). A library the install step
    built for this CPU is loaded as it is (``prebuilt=False`` skips it: the tests of the build)."""
    try:
        if prebuilt:
            built_at_install = prebuilt_path(source)
            if built_at_install.exists():
                return ctypes.CDLL(str(built_at_install))
        path = library_path(source, cache_dir)
        with _build_lock(path):
            if not path.exists():
                build_library(source, path)
        return ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as error:
        raise NativeBuildError(f"{source.file_name} cannot be built or loaded: {error}") from None
