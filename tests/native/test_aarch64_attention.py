"""The paged decode attention's aarch64 builds, run under qemu-aarch64, give x86's bits.

The kernel's vector path (decode_attention.c) is one algorithm over 16 float32
lanes: one AVX-512 register, two AVX2 ones, four NEON ones, each lane seeing the
same float operations in the same order, and the key sums reduced in one fixed
tree. Here the reference is the kernel's library at the best level this x86 CPU
runs with float32 arithmetic throughout (not AVX512-BF16's dot products); the driver (decode_attention_driver.c, the kernel compiled in whole) is
cross-compiled at each aarch64 level and run under user-mode qemu, and its output
and caches must be the same bytes. The cases: the default model's heads (3 KV
heads of 3 query heads, 64 wide), one query head a KV head 128 wide, 8 a KV head;
a decoding step over sequences of 1, 15, 16, 17, 100 and 700 keys (partial blocks,
several splits), and a step with prompt tokens (the prompt tiles: prefills, chunks
after a prefix, across splits, and a decode row beside them); bfloat16 and float32
caches, and int8 and e4m3 caches with their row scales (bfloat16 activations). The driver's x86 build is checked against the library
first, so that a difference is the kernel's, not the driver's.
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
from pathlib import Path

import pytest
import torch
from aarch64_tools import COMPILER, HOST_COMPILER, NATIVE_INCLUDE, OBJDUMP, QEMU, REPO, require_tools

from tercet.model.kv_cache import quantize_rows
from tercet.native.cpu import runnable_levels
from tercet.native.levels import level_named
from tercet.plugins.paged_cpu_attention.build import load_kernel, takes_bf16_dot_products

DRIVER = Path(__file__).with_name("decode_attention_driver.c")
INCLUDES = (*NATIVE_INCLUDE, "-I", str(REPO / "plugins" / "paged_cpu_attention"))
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2, torch.float8_e4m3fn: 3}
# (activations, cache)
DTYPES = ((torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32), (torch.bfloat16, torch.int8),
          (torch.bfloat16, torch.float8_e4m3fn))
SEQ_LENS = (1, 15, 16, 17, 100, 700)
# The best level this CPU runs whose arithmetic is float32 throughout, as NEON's is (a level with
# AVX512-BF16 runs a bfloat16 cache on its bfloat16 dot products).
REFERENCE_LEVEL = [level for level in runnable_levels() if not takes_bf16_dot_products(level)][-1]
# Each step's sequences as (cached prefix, new tokens).
STEPS = {"decode": tuple((length - 1, 1) for length in SEQ_LENS), "prompt": ((0, 40), (250, 20), (9, 1), (690, 17))}
# (num_kv_heads, group, head_dim, split_keys): the default model's heads with the backend's splits, and
# small splits (many per sequence, joined in order).
SHAPES = ((3, 3, 64, 256), (2, 1, 128, 32), (1, 8, 64, 64))
RUNS = [("neon", "cortex-a57"), ("dotprod", "cortex-a76"), ("i8mm", "max")]


@pytest.fixture(scope="module", autouse=True)
def _tools():
    require_tools()


def _tensors(seed: int, spans, num_kv_heads: int, group: int, head_dim: int, dtype: torch.dtype,
             cache_dtype: torch.dtype) -> dict:
    """A step: each sequence's cache rows scattered over the slots, a kernel row for each new token."""
    generator = torch.Generator().manual_seed(seed)
    heads, lengths = num_kv_heads * group, [prefix + new for prefix, new in spans]
    slots = sum(lengths) + 8
    order = torch.randperm(slots, generator=generator)
    table = torch.zeros(len(spans) + 1, max(lengths), dtype=torch.int64)
    used, rows, seq_lens, out_cache_loc = 0, [], [], []
    for b, (prefix, new) in enumerate(spans):
        table[b + 1, :prefix + new] = order[used:used + prefix + new]
        used += prefix + new
        for position in range(prefix, prefix + new):
            rows.append(b + 1)
            seq_lens.append(position + 1)
            out_cache_loc.append(int(table[b + 1, position]))
    batch = len(rows)
    def random(*shape):
        return (torch.randn(*shape, generator=generator) * 2).to(dtype)
    caches = {}
    for name in ("k", "v"):
        values = random(slots, num_kv_heads, head_dim)
        if cache_dtype in (torch.int8, torch.float8_e4m3fn):
            values, caches[f"{name}_scales"] = quantize_rows(values, cache_dtype)
        caches[f"{name}_cache"] = values
    return {
        "q": random(batch, heads, head_dim), "k_new": random(batch, num_kv_heads, head_dim),
        "v_new": random(batch, num_kv_heads, head_dim), **caches, "table": table,
        "rows": torch.tensor(rows, dtype=torch.int64), "seq_lens": torch.tensor(seq_lens, dtype=torch.int64),
        "out_cache_loc": torch.tensor(out_cache_loc, dtype=torch.int64),
    }


def _on_x86(t: dict, num_kv_heads: int, group: int, head_dim: int, split_keys: int) -> bytes:
    """The library's output and caches after the call, at the reference level."""
    kernel, k_cache, v_cache = load_kernel(level=REFERENCE_LEVEL), t["k_cache"].clone(), t["v_cache"].clone()
    scales = [t[name].clone() for name in ("k_scales", "v_scales") if name in t]
    heads, dtype, cache_dtype = num_kv_heads * group, t["q"].dtype, t["k_cache"].dtype
    batch = t["rows"].shape[0]
    out = torch.empty(batch, heads * head_dim, dtype=dtype)
    status = kernel(
        t["q"].data_ptr(), heads * head_dim, t["k_new"].data_ptr(), num_kv_heads * head_dim, t["v_new"].data_ptr(),
        num_kv_heads * head_dim, DTYPE_CODES[dtype], k_cache.data_ptr(), v_cache.data_ptr(),
        *([scale.data_ptr() for scale in scales] or [None, None]), DTYPE_CODES[cache_dtype],
        _pointer(t["table"]), t["table"].stride(0), _pointer(t["rows"]), _pointer(t["seq_lens"]),
        _pointer(t["out_cache_loc"]), out.data_ptr(), batch, heads, num_kv_heads, head_dim,
        head_dim ** -0.5, split_keys)
    assert status == 0
    return b"".join(tensor.view(torch.uint8).numpy().tobytes() for tensor in (out, k_cache, v_cache, *scales))


def _pointer(tensor: torch.Tensor):
    return ctypes.cast(tensor.data_ptr(), ctypes.POINTER(ctypes.c_int64))


def _case_file(path: Path, t: dict, num_kv_heads: int, group: int, head_dim: int, split_keys: int) -> Path:
    dtype = t["q"].dtype
    header = struct.pack("<10q", t["rows"].shape[0], num_kv_heads * group, num_kv_heads, head_dim, split_keys,
                         DTYPE_CODES[dtype], DTYPE_CODES[t["k_cache"].dtype], t["k_cache"].shape[0], *t["table"].shape)
    header += struct.pack("<f", head_dim ** -0.5)
    scales = tuple(name for name in ("k_scales", "v_scales") if name in t)
    parts = ("q", "k_new", "v_new", "k_cache", "v_cache", *scales, "table", "rows", "seq_lens", "out_cache_loc")
    path.write_bytes(header + b"".join(t[name].contiguous().view(torch.uint8).numpy().tobytes() for name in parts))
    return path


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[tuple[Path, bytes]]:
    """Each case's file for the driver, and x86's bytes."""
    folder = tmp_path_factory.mktemp("attention_cases")
    made = []
    for index, (num_kv_heads, group, head_dim, split_keys) in enumerate(SHAPES):
        for step, spans in STEPS.items():
            for dtype, cache_dtype in DTYPES:
                t = _tensors(index, spans, num_kv_heads, group, head_dim, dtype, cache_dtype)
                name = f"{step}_kv{num_kv_heads}_g{group}_d{head_dim}_s{split_keys}_{str(cache_dtype).removeprefix('torch.')}"
                made.append((_case_file(folder / f"{name}.case", t, num_kv_heads, group, head_dim, split_keys),
                             _on_x86(t, num_kv_heads, group, head_dim, split_keys)))
    return made


def _compile(compiler: str, flags: tuple[str, ...], target: Path) -> Path:
    subprocess.run([compiler, "-O3", "-std=c11", "-fopenmp", *flags, *INCLUDES, str(DRIVER), "-o", str(target),
                    "-lm"], check=True, capture_output=True, text=True, timeout=120)
    return target


def _run(command: list[str], out_dir: Path, cases) -> list[bytes]:
    out_dir.mkdir()
    result = subprocess.run([*command, str(out_dir), *(str(path) for path, _ in cases)], capture_output=True,
                            text=True, timeout=300, env={"OMP_NUM_THREADS": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:1] == ["vector 1"], "the driver was built without the vector path"
    return [(out_dir / f"{path.name}.out").read_bytes() for path, _ in cases]


def _differences(got: list[bytes], cases) -> list[str]:
    return [f"{path.name}: {sum(a != b for a, b in zip(out, expected))} bytes differ"
            for out, (path, expected) in zip(got, cases) if out != expected]


def test_the_drivers_x86_build_gives_the_librarys_bytes(cases, tmp_path):
    program = _compile(HOST_COMPILER, REFERENCE_LEVEL.flags, tmp_path / "driver")
    assert _differences(_run([str(program)], tmp_path / "out", cases), cases) == []


@pytest.mark.parametrize(("level", "cpu"), RUNS)
def test_aarch64_level_gives_x86_bits(level, cpu, cases, tmp_path):
    program = _compile(COMPILER, ("-static", *level_named(level).flags), tmp_path / f"driver_{level}")
    assert _differences(_run([QEMU, "-cpu", cpu, str(program)], tmp_path / "out", cases), cases) == []


def test_the_neon_build_takes_the_vector_path(tmp_path):
    """The key sums' fixed tree in NEON's registers: transposes and fused multiply-adds, not the scalar loop."""
    object_file = tmp_path / "attention.o"
    _compile(COMPILER, ("-c", *level_named("neon").flags), object_file)
    listing = subprocess.run([OBJDUMP, "-d", str(object_file)], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    mnemonics = {line.split("\t")[2].split()[0] for line in listing.splitlines() if line.count("\t") >= 2}
    assert {"trn1", "trn2", "fmla"} <= mnemonics
