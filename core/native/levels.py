"""The instruction-set levels tercet's C kernels are built for, one library per level.

A level is a set of CPU features and the compiler flags that let the compiler use
exactly those (never ``-march=native``): a library built for a level runs on
every CPU that has its features, so the install step can build every level the
compiler knows (one wheel for all x86 machines) and the run time loads the best
one this CPU has (:mod:`tercet.native.cpu`). A kernel's source picks its code
per level at compile time (``#if defined(__AVX2__)`` …); where a level has no
code of its own, the source's portable C is compiled with that level's flags.

This module imports nothing of tercet's: the install step loads it by its path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IsaLevel:
    """One level: its name (``model.cpu_isa``), architecture, rank among the architecture's levels
    (higher is faster), compiler flags and the CPU features it needs (as Linux names them in
    ``/proc/cpuinfo``: ``flags`` on x86, ``Features`` on aarch64)."""

    name: str
    architecture: str
    rank: int
    flags: tuple[str, ...]
    needs: frozenset[str]
    summary: str

    def runs_on(self, features: frozenset[str]) -> bool:
        return self.needs <= features


_AVX2 = frozenset({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"})
_AVX512_VNNI = _AVX2 | frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_vnni"})
_AVX512 = _AVX512_VNNI | frozenset({"avx512_bf16"})

# Any architecture: the compiler's defaults, no instruction beyond the architecture's baseline.
PORTABLE = IsaLevel("portable", "any", 0, (), frozenset(), "portable C, no vector code of tercet's own")

LEVELS = (
    PORTABLE,
    IsaLevel("avx2", "x86_64", 1, ("-march=x86-64-v3",), _AVX2,
             "AVX2, FMA, F16C (Haswell on; AMD Zen 1-3; Intel client chips)"),
    # The block kernel's AVX2 code with vpdpbusd for its int8 products (VEX-encoded here, EVEX with VL at
    # avx512vnni); the other kernels are the AVX2 level's (avxvnni) or the AVX-512 level's (avx512vnni).
    IsaLevel("avxvnni", "x86_64", 2, ("-march=x86-64-v3", "-mavxvnni"), _AVX2 | frozenset({"avx_vnni"}),
             "AVX2 with AVX-VNNI's 256-bit int8 dot products (Intel client chips from Alder Lake)"),
    IsaLevel("avx512vnni", "x86_64", 3, ("-march=x86-64-v4", "-mavx512vnni"), _AVX512_VNNI,
             "AVX-512 with VNNI but no BF16 (Cascade Lake, Ice Lake)"),
    IsaLevel("avx512", "x86_64", 4, ("-march=x86-64-v4", "-mavx512vnni", "-mavx512bf16"), _AVX512,
             "AVX-512 with VNNI and BF16 (Zen 4 on; Cooper Lake, Sapphire Rapids on)"),
    IsaLevel("amx", "x86_64", 5, ("-march=x86-64-v4", "-mavx512vnni", "-mavx512bf16", "-mamx-tile", "-mamx-int8"),
             _AVX512 | frozenset({"amx_tile", "amx_int8"}), "AVX-512 and AMX's int8 tiles (Sapphire Rapids on)"),
    IsaLevel("neon", "aarch64", 1, ("-march=armv8-a",), frozenset({"asimd"}), "NEON (every aarch64 CPU)"),
    IsaLevel("dotprod", "aarch64", 2, ("-march=armv8.2-a+dotprod",), frozenset({"asimd", "asimddp"}),
             "NEON with the int8 dot product (Cortex-A76 on, Graviton 2 on, Apple M1 on)"),
    IsaLevel("i8mm", "aarch64", 3, ("-march=armv8.2-a+dotprod+i8mm",), frozenset({"asimd", "asimddp", "i8mm"}),
             "NEON with int8 matrix multiplies (Graviton 3 on, Apple M2 on)"),
)
LEVEL_NAMES = tuple(level.name for level in LEVELS)


def level_named(name: str) -> IsaLevel:
    for level in LEVELS:
        if level.name == name:
            return level
    raise ValueError(f"unknown instruction-set level {name!r}; the levels are {', '.join(LEVEL_NAMES)}")


def levels_of(architecture: str) -> tuple[IsaLevel, ...]:
    """The levels a machine of ``architecture`` (``platform.machine()``) may have, lowest first."""
    return tuple(level for level in LEVELS if level.architecture in ("any", _canonical(architecture)))


def _canonical(architecture: str) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(architecture.lower(), architecture.lower())
