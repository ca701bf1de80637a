"""The block kernel's aarch64 builds, run under qemu-aarch64, give x86's bits.

Every level of the kernel computes exactly the portable C path's results
(block_matmul.c says how). Here the weights are packed, and the reference y
computed, by that portable path on this x86 machine (the kernel's portable
library); the driver (block_matmul_driver.c, the kernel compiled in whole) is
cross-compiled for each aarch64 level (plain NEON, the dot product, int8
matrices) and run under user-mode qemu on emulated CPUs that have the level's
features, and its y must be the same bytes. bfloat16 hides most differences of
a float32 ulp, so the driver also writes the stages before y's rounding (the
quantized rows and every tile's float32 sums), which must be the same bytes as
the driver's own portable build on x86 gives. The cases: Q4_0, Q4_1 and Q8_0,
row counts from one to past a chunk of 64 (every remainder of SMMLA's row pairs
and of the groups of 4), N not a multiple of 16 (a padded last tile, and an odd
one that is its own pair), and blocks of zeros, of ties and of inputs so small
that 127 / max |x| overflows; bfloat16 rows, and float32 rows (whose y is the
float32 sums themselves) for some of the row counts. The compiled code is also checked for the
instructions each level is for (SDOT, SMMLA).

Without the cross compiler or qemu-aarch64 the tests skip, naming what is missing,
except under CI=true, where they fail (Debian's gcc-aarch64-linux-gnu and qemu-user).
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
import torch
from aarch64_tools import COMPILER, HOST_COMPILER, NATIVE_INCLUDE, OBJDUMP, QEMU, REPO, require_tools

from tercet.formats.gguf_blocks import BlockQuantized, quantize_blocks
from tercet.native.levels import level_named
from tercet.plugins.linear_layers.block_matmul import KIND_CODES, PORTABLE_SOURCE, load_kernel, pack_units

DRIVER = Path(__file__).with_name("block_matmul_driver.c")
INCLUDES = (*NATIVE_INCLUDE, "-I", str(REPO / "plugins" / "linear_layers"))
# Each level (tercet.native.levels: its -march flags) on the emulated CPUs that have its features
# (cortex-a57: ARMv8.0, no dot product; cortex-a76: the dot product; max: i8mm too). The i8mm build
# on a CPU without i8mm is not a case: it stops at its first SMMLA.
RUNS = [("neon", "cortex-a57"), ("neon", "max"), ("dotprod", "cortex-a76"), ("dotprod", "max"), ("i8mm", "max")]
# Per level, the instructions its object must hold and those it must not.
INSTRUCTIONS = {"neon": ((), ("sdot", "smmla")), "dotprod": (("sdot",), ("smmla",)), "i8mm": (("sdot", "smmla"), ())}

ROW_COUNTS = (1, 3, 4, 5, 17, 33, 70)
FLOAT32_ROW_COUNTS = (1, 4, 5, 70)
DTYPE_CODES = {torch.bfloat16: 0, torch.float32: 1}
K = 5 * 32
# Not multiples of 16: 3 tiles (a pair and an odd last tile), 1 padded tile, 4 tiles with the last padded.
COLUMN_COUNTS = (40, 8, 57)


@pytest.fixture(scope="module", autouse=True)
def _tools():
    require_tools()


def _compile(compiler: str, flags: tuple[str, ...], target: Path) -> Path:
    subprocess.run([compiler, "-O2", "-std=c11", *flags, *INCLUDES, str(DRIVER), "-o", str(target), "-lm"],
                   check=True, capture_output=True, text=True, timeout=120)
    return target


def _run_driver(command: list[str], out_dir: Path, cases) -> dict[str, tuple[bytes, bytes]]:
    """Each case's y and stages (see the driver) from one run of ``command`` (the driver, maybe under qemu)."""
    out_dir.mkdir()
    result = subprocess.run([*command, str(out_dir), *(str(path) for _, path, _ in cases)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:1] == ["vectorized 1" if command[0] == QEMU else "vectorized 0"]
    return {name: ((out_dir / f"{path.name}.y").read_bytes(), (out_dir / f"{path.name}.steps").read_bytes())
            for name, path, _ in cases}


def _weights(type_name: str, n: int, seed: int) -> BlockQuantized:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(n, K, generator=generator) * 0.1
    weight[0, :32] += 3.0  # a block with a large min (Q4_1)
    block = quantize_blocks(weight, type_name)
    if type_name == "Q8_0":
        block.codes[-1, :8] = -128  # the extreme code, stored as u = 0
        block.codes[-1, 8:16] = 127
    return block


def _x(rows: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randn(rows, K // 32, 32, generator=generator) * torch.rand(rows, K // 32, 1, generator=generator) * 4
    x = blocks.view(rows, K)
    x[0, 32:64] = 0.0  # a block of zeros: sx = 0
    x[-1, 64:96] *= 1e-38  # 127 / max |x| overflows: the portable path's xq are then 0
    # max |x| = 127: x · 127 / max |x| = x, halves that round to even (2.5 to 2, -0.5 to -0)
    x[-1, 96:128] = torch.arange(32) - 15.5
    x[-1, 127] = 127.0
    return x.to(dtype)


def _case(library, folder: Path, type_name: str, kind_index: int, index: int, rows: int, dtype: torch.dtype):
    """A case's name, file and x86's portable y (bytes)."""
    n = COLUMN_COUNTS[(index + kind_index) % len(COLUMN_COUNTS)]
    seed = 100 * kind_index + index
    units = pack_units(_weights(type_name, n, seed), library).contiguous()
    x = _x(rows, seed, dtype).contiguous()
    y = torch.empty(rows, n, dtype=dtype)
    kind = KIND_CODES[type_name]
    function = library.tercet_block_matmul_f32 if dtype == torch.float32 else library.tercet_block_matmul
    assert function(x.data_ptr(), K, rows, K, units.data_ptr(), kind, n, y.data_ptr(), n) == 0
    name = f"{type_name}_rows{rows}_n{n}" + ("_f32" if dtype == torch.float32 else "")
    path = folder / f"{name}.case"
    header = struct.pack("<6q", kind, rows, K, n, units.numel(), DTYPE_CODES[dtype])
    path.write_bytes(header + x.view(torch.uint8).numpy().tobytes() + units.numpy().tobytes())
    return name, path, y.view(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[tuple[str, Path, bytes]]:
    """Every case's file for the driver and x86's portable y (bytes), by name."""
    library = load_kernel(PORTABLE_SOURCE)
    folder = tmp_path_factory.mktemp("aarch64_cases")
    made = []
    for kind_index, type_name in enumerate(("Q4_0", "Q4_1", "Q8_0")):
        for index, rows in enumerate(ROW_COUNTS):
            made.append(_case(library, folder, type_name, kind_index, index, rows, torch.bfloat16))
            if rows in FLOAT32_ROW_COUNTS:
                made.append(_case(library, folder, type_name, kind_index, index, rows, torch.float32))
    return made


@pytest.fixture(scope="module")
def reference(cases, tmp_path_factory) -> dict[str, tuple[bytes, bytes]]:
    """The driver's portable build on x86: its y (checked against the library's) and stages."""
    folder = tmp_path_factory.mktemp("x86_portable")
    program = _compile(HOST_COMPILER, ("-DTERCET_PORTABLE",), folder / "driver")
    got = _run_driver([str(program)], folder / "out", cases)
    for name, _, expected in cases:
        assert got[name][0] == expected, f"{name}: the driver's portable y is not the library's"
    return got


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    """Each aarch64 level's driver, static (for qemu)."""
    folder = tmp_path_factory.mktemp("aarch64_builds")
    return {level: _compile(COMPILER, ("-static", *level_named(level).flags), folder / f"driver_{level}")
            for level in INSTRUCTIONS}


@pytest.mark.parametrize(("level", "cpu"), RUNS)
def test_aarch64_level_gives_x86_bits(level, cpu, builds, cases, reference, tmp_path):
    got = _run_driver([QEMU, "-cpu", cpu, str(builds[level])], tmp_path / "out", cases)
    differing = []
    for name, _, expected_y in cases:
        y, steps = got[name]
        if y != expected_y:
            element = "I" if name.endswith("_f32") else "H"
            pairs = list(zip(memoryview(y).cast(element), memoryview(expected_y).cast(element)))
            at = [i for i, (a, b) in enumerate(pairs) if a != b]
            differing.append(f"{name}: y, {len(at)} of {len(pairs)} differ, first at {at[0]}")
        elif steps != reference[name][1]:
            first = next(i for i, (a, b) in enumerate(zip(steps, reference[name][1])) if a != b)
            differing.append(f"{name}: the stages before y's rounding, first at byte {first}")
    assert not differing, "; ".join(differing)


@pytest.mark.parametrize("level", list(INSTRUCTIONS))
def test_level_uses_its_instructions(level, tmp_path):
    object_file = tmp_path / "driver.o"
    _compile(COMPILER, ("-c", *level_named(level).flags), object_file)
    listing = subprocess.run([OBJDUMP, "-d", str(object_file)], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    mnemonics = {line.split("\t")[2].split()[0] for line in listing.splitlines() if line.count("\t") >= 2}
    present, absent = INSTRUCTIONS[level]
    assert set(present) <= mnemonics, f"{level}: no {sorted(set(present) - mnemonics)}"
    assert not set(absent) & mnemonics, f"{level}: {sorted(set(absent) & mnemonics)} in a build without them"
    # Without the dot product, the integer sums are NEON's widening byte products, added pairwise.
    if level == "neon":
        assert {"smull", "smull2", "sadalp"} <= mnemonics
