"""Each x86 level's libraries hold no instruction of a higher level: what lets the AVX2 build run on a CPU
without AVX-512, checked on any x86 machine by reading the code (objdump), not by running it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tercet.native.build import load_library, prebuilt_path
from tercet.native.cpu import machine
from tercet.native.levels import level_named
from tercet.native.prebuild import built_in_kernels
from tercet.native.build import NativeSource

pytestmark = pytest.mark.skipif(machine() not in ("x86_64", "amd64"), reason="the x86 levels are built on x86 only")

# What a level's code may not use: AVX2's and AVX-VNNI's no 512-bit register and no mask register
# (AVX-512's), the portable level no 256-bit one either.
FORBIDDEN = {"avx2": re.compile(r"%zmm|%k[1-7]\b"), "avxvnni": re.compile(r"%zmm|%k[1-7]\b"),
             "portable": re.compile(r"%[yz]mm|%k[1-7]\b")}


def _objdump() -> str:
    found = shutil.which("objdump")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("objdump (binutils) is missing; CI has it with gcc")
        pytest.skip("objdump (binutils) is not installed")
    return found


def _sources() -> list[NativeSource]:
    return [NativeSource(package, file_name, library_name, (*NativeSource.flags, *extra))
            for package, file_name, library_name, extra in built_in_kernels()]


def _disassembly(source: NativeSource, level_name: str, tmp_path) -> tuple[str, str]:
    """The library of ``source`` at a level (built here, or taken from the install step's folder): its name and code."""
    level = level_named(level_name)
    load_library(source, tmp_path, level=level)
    built = prebuilt_path(source, level)
    if not built.exists():
        built = next((tmp_path / "kernels").glob(f"{source.library_name}-{level.name}-*.so"))
    return built.name, subprocess.run([_objdump(), "-d", "--no-show-raw-insn", str(built)], capture_output=True,
                                      text=True, check=True).stdout


@pytest.mark.parametrize("level_name", FORBIDDEN)
def test_a_levels_libraries_hold_no_instruction_of_a_higher_level(level_name, tmp_path):
    for source in _sources():
        name, code = _disassembly(source, level_name, tmp_path)
        offending = [line for line in code.splitlines() if FORBIDDEN[level_name].search(line)]
        assert not offending, f"{name} ({level_name}) uses {offending[:3]}"


def test_the_avxvnni_block_kernel_takes_its_products_from_vex_vpdpbusd(tmp_path):
    """No CPU here need have AVX-VNNI, so its build is read, not run: VEX-encoded vpdpbusd in place of AVX2's
    vpmaddubsw/vpmaddwd (the same C runs in the tests through the EVEX form, at avx512vnni)."""
    block_kernel = next(source for source in _sources() if source.library_name == "block_matmul")
    _, vnni = _disassembly(block_kernel, "avxvnni", tmp_path)
    _, avx2 = _disassembly(block_kernel, "avx2", tmp_path)
    assert "{vex} vpdpbusd" in vnni and "vpmaddubsw" not in vnni
    assert "vpdpbusd" not in avx2 and "vpmaddubsw" in avx2
