"""The decode kernel, compiled once per machine and loaded with ctypes.

The C source ships in this package; the first process that needs it compiles
it with the system's C compiler (``-O3 -march=native -fopenmp``: the kernel is
built for the CPU it runs on) into tercet's cache, under a name that is a
digest of the source, the flags, the compiler and the CPU. A later start, or another
process of the same server, loads what is there. Several processes compiling
at once each write their own file and rename it into place: the first rename
wins, and every one of them loads a whole library.

No compiler, or one that fails, is a :class:`KernelUnavailable` with the
reason: the backend then runs as ``torch_native`` does, and says so once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from tercet.plugin_api import default_cache_dir

SOURCE = "decode_attention.c"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11")
COMPILE_TIMEOUT_S = 120
INT64_P = ctypes.POINTER(ctypes.c_int64)


class KernelUnavailable(RuntimeError):
    """The kernel cannot be built or loaded here; the message says why."""


def compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``, ``gcc`` or ``clang``, whichever is found first."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise KernelUnavailable("no C compiler found (set CC, or install gcc)")


def cpu_identity() -> str:
    """The CPU's model and instruction-set flags: ``-march=native`` code is only for CPUs like it,
    and a cache directory may be shared by machines that differ (a home directory over NFS)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line.strip() for line in lines if line.split(":")[0].strip() in wanted}))


def library_path(cache_dir: Path | None = None) -> Path:
    """Where the compiled kernel of this source, these flags, this compiler and this CPU lives."""
    source = resources.files(__package__).joinpath(SOURCE).read_bytes()
    cc = compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = source + " ".join(FLAGS).encode() + version.encode() + cpu_identity().encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    return Path(cache_dir or default_cache_dir()) / "kernels" / f"paged_decode_attention-{digest}.so"


def build(target: Path) -> Path:
    """Compile the source into ``target`` (atomically); returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resources.files(__package__).joinpath(SOURCE)) as source:
        handle, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=target.parent)
        os.close(handle)
        try:
            compiled = subprocess.run(
                [compiler(), *FLAGS, "-o", partial, str(source), "-lm"],
                capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
            )
            if compiled.returncode != 0:
                raise KernelUnavailable(f"compiling {SOURCE} failed: {compiled.stderr.strip()[-2000:]}")
            os.replace(partial, target)
        except subprocess.TimeoutExpired:
            raise KernelUnavailable(f"compiling {SOURCE} took over {COMPILE_TIMEOUT_S} s") from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return target


def load_kernel(cache_dir: Path | None = None):
    """The kernel's C function, built first if this machine has no copy yet."""
    try:
        path = library_path(cache_dir)
        if not path.exists():
            build(path)
        library = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as error:
        raise KernelUnavailable(f"the decode kernel cannot be built or loaded: {error}") from None
    function = library.tercet_paged_decode_attention
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, INT64_P, ctypes.c_int64,
        INT64_P, INT64_P, INT64_P,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
    ]
    return function
