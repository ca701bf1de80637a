"""What this CPU can run, asked once: the one place any kernel's choice of instructions comes from.

- x86-64: the ``flags`` of ``/proc/cpuinfo``. Linux lists a feature there only when the
  CPU has it (cpuid) and the kernel has enabled its register state (XCR0): AVX-512 on a
  kernel or VM that does not save the ZMM registers is not listed, so a level found here
  never faults for want of OS support. AMX's tiles are also granted per process on request
  (the block kernel asks, and probes its first tile instruction with SIGILL caught).
- aarch64: the auxiliary vector's ``AT_HWCAP``/``AT_HWCAP2`` (``getauxval``), else the
  ``Features`` of ``/proc/cpuinfo``.
- Anything else: the portable level, and the kernels of torch.

The level in use is the best level this CPU runs, unless :func:`use_level` forced a lower one
(``model.cpu_isa``, for tests and comparisons: an AVX-512 machine runs the AVX2 kernels). A
forced level above the CPU's is refused, so no library for instructions the CPU lacks is ever
loaded.

This module imports nothing of tercet's: the install step loads :mod:`.levels` by its path, and
:mod:`.build` imports this one only when it loads a library.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from pathlib import Path

try:
    from tercet.native.levels import LEVEL_NAMES, PORTABLE, IsaLevel, level_named, levels_of
except ImportError:  # loaded by its path beside levels.py (the install step)
    from levels import LEVEL_NAMES, PORTABLE, IsaLevel, level_named, levels_of  # type: ignore[no-redef]

AUTO = "auto"
# The environment variable a forced level travels in to processes this one starts (tests' subprocesses,
# a scheduler's tensor-parallel workers), read when this module first answers.
LEVEL_ENV = "TERCET_CPU_ISA"
# aarch64's auxiliary-vector entries and the bits of the features the levels need (asm/hwcap.h).
AT_HWCAP, AT_HWCAP2 = 16, 26
HWCAP_BITS = {"asimd": 1 << 1, "asimddp": 1 << 20}
HWCAP2_BITS = {"i8mm": 1 << 13}


class UnsupportedLevel(ValueError):
    """A level this CPU cannot run was asked for; the message names what it lacks."""


def machine() -> str:
    return platform.machine().lower()


@functools.cache
def cpu_features() -> frozenset[str]:
    """This CPU's features as Linux names them (empty where they cannot be read)."""
    if machine() in ("aarch64", "arm64"):
        return _hwcap_features() or _cpuinfo_features("Features")
    if machine() in ("x86_64", "amd64"):
        return _cpuinfo_features("flags")
    return frozenset()


def _cpuinfo_features(field: str) -> frozenset[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == field:
            return frozenset(value.split())  # the first CPU's: Linux lists only the features all CPUs share
    return frozenset()


def _hwcap_features() -> frozenset[str]:
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return frozenset()
    getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
    hwcap, hwcap2 = getauxval(AT_HWCAP), getauxval(AT_HWCAP2)
    found = {name for name, bit in HWCAP_BITS.items() if hwcap & bit}
    found |= {name for name, bit in HWCAP2_BITS.items() if hwcap2 & bit}
    return frozenset(found)


def runnable_levels(features: frozenset[str] | None = None) -> tuple[IsaLevel, ...]:
    """The levels this CPU (or one with ``features``) runs, lowest first; the portable level always."""
    features = cpu_features() if features is None else features
    return tuple(level for level in levels_of(machine()) if level.runs_on(features))


def best_level() -> IsaLevel:
    return runnable_levels()[-1]


def check_level(name: str) -> IsaLevel:
    """The level ``name`` (``"auto"``: the best) if this CPU runs it; else :class:`UnsupportedLevel` saying why."""
    if name == AUTO:
        return best_level()
    if name not in LEVEL_NAMES:
        raise UnsupportedLevel(f"unknown instruction-set level {name!r}; the levels are auto, {', '.join(LEVEL_NAMES)}")
    level = level_named(name)
    if level not in runnable_levels():
        if level not in levels_of(machine()):
            what = f"is {machine()}, not {level.architecture}"
        else:
            what = f"lacks {', '.join(sorted(level.needs - cpu_features()))}"
        raise UnsupportedLevel(
            f"instruction-set level {name!r} cannot run here: this CPU {what}; it runs "
            f"{', '.join(runnable.name for runnable in runnable_levels())}"
        )
    return level


_forced: IsaLevel | None = None


def use_level(name: str) -> IsaLevel:
    """Run this process's kernels (and those of the processes it starts) at ``name``, or at the best
    level for ``"auto"``; raises :class:`UnsupportedLevel` for a level the CPU lacks.

    Call it before the first kernel is loaded: a library already loaded keeps its level."""
    global _forced
    level = check_level(name)
    _forced = None if name == AUTO else level
    if _forced is None:
        os.environ.pop(LEVEL_ENV, None)
    else:
        os.environ[LEVEL_ENV] = level.name
    return level


def level_in_use() -> IsaLevel:
    """The level kernels are built and loaded at: the forced one, else the best this CPU runs."""
    if _forced is not None:
        return _forced
    inherited = os.environ.get(LEVEL_ENV)
    return check_level(inherited) if inherited else best_level()


def is_forced() -> bool:
    return _forced is not None or bool(os.environ.get(LEVEL_ENV))


# What keeps torch's own kernels (ATen's vector code, oneDNN) at a forced level, as on a CPU that has
# no more: on an AVX-512 machine forced to avx2, oneDNN then refuses bfloat16 packing as it would there.
TORCH_LIMITS = {
    "portable": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avxvnni": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"},
    "avx512vnni": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
}


def limit_torch_to(name: str) -> None:
    """Before torch is imported: where ``name`` forces a level below this CPU's best, torch's kernels stay
    at it too. Variables the user set are kept; a level the CPU lacks is left for :func:`use_level` to refuse."""
    try:
        level = check_level(name)
    except UnsupportedLevel:
        return
    if level != best_level():
        for variable, value in TORCH_LIMITS.get(level.name, {}).items():
            os.environ.setdefault(variable, value)


def describe() -> str:
    """One line for logs: the level in use, whether it was forced, and the CPU's best."""
    level, best = level_in_use(), best_level()
    how = f"forced by model.cpu_isa; this CPU's best is {best.name}" if level != best else "this CPU's best"
    return f"{level.name} ({level.summary}; {how})"


__all__ = ["AUTO", "LEVEL_ENV", "PORTABLE", "TORCH_LIMITS", "UnsupportedLevel", "best_level", "check_level",
           "cpu_features", "describe", "is_forced", "level_in_use", "limit_torch_to", "runnable_levels",
           "use_level"]
