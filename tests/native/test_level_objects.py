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

# What a level's code may not use: AVX2's no 512-bit register and no mask register (AVX-512's), the
# portable level no 256-bit one either.
FORBIDDEN = {"avx2": re.compile(r"%zmm|%k[1-7]\b"), "portable": re.compile(r"%[yz]mm|%k[1-7]\b")}


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


@pytest.mark.parametrize("level_name", FORBIDDEN)
def test_a_levels_libraries_hold_no_instruction_of_a_higher_level(level_name, tmp_path):
    objdump, level = _objdump(), level_named(level_name)
    for source in _sources():
        load_library(source, tmp_path, level=level)  # built here (or taken from the install step's folder)
        built = prebuilt_path(source, level)
        if not built.exists():
            built = next((tmp_path / "kernels").glob(f"{source.library_name}-{level.name}-*.so"))
        code = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(built)], capture_output=True, text=True,
                              check=True).stdout
        offending = [line for line in code.splitlines() if FORBIDDEN[level_name].search(line)]
        assert not offending, f"{built.name} ({level_name}) uses {offending[:3]}"
