"""What this CPU can run: its features read once, the levels it runs, and a forced level."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tercet.native import cpu
from tercet.native.levels import LEVELS, PORTABLE, level_named, levels_of

ZEN1 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"})
ICE_LAKE = ZEN1 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_vnni"}
ALDER_LAKE = ZEN1 | {"avx_vnni"}
SAPPHIRE_RAPIDS = ICE_LAKE | {"avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}


@pytest.fixture
def forced_level():
    """Whatever a test forces is undone after it."""
    yield
    cpu.use_level(cpu.AUTO)


@pytest.fixture
def on_x86(monkeypatch):
    monkeypatch.setattr(cpu, "machine", lambda: "x86_64")


def test_an_avx2_only_cpu_runs_the_avx2_level_and_nothing_above(on_x86):
    assert [level.name for level in cpu.runnable_levels(ZEN1)] == ["portable", "avx2"]


def test_avx512_without_vnni_stays_at_avx2(on_x86):
    skylake_x = ZEN1 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
    assert cpu.runnable_levels(skylake_x)[-1].name == "avx2"


def test_a_xeon_with_amx_runs_every_x86_level(on_x86):
    assert [level.name for level in cpu.runnable_levels(SAPPHIRE_RAPIDS)] == [
        "portable", "avx2", "avxvnni", "avx512vnni", "avx512", "amx"]


def test_a_client_chip_with_avx_vnni_runs_the_avxvnni_level(on_x86):
    assert cpu.runnable_levels(ALDER_LAKE)[-1].name == "avxvnni"


def test_avx512_with_vnni_but_no_bf16_runs_the_avx512vnni_level(on_x86):
    assert [level.name for level in cpu.runnable_levels(ICE_LAKE)] == ["portable", "avx2", "avx512vnni"]


def test_an_older_x86_or_unknown_features_runs_portable_code_only(on_x86):
    assert cpu.runnable_levels(frozenset({"sse4_2", "avx"})) == (PORTABLE,)
    assert cpu.runnable_levels(frozenset()) == (PORTABLE,)


def test_aarch64_levels_follow_dotprod_and_i8mm(monkeypatch):
    monkeypatch.setattr(cpu, "machine", lambda: "aarch64")
    assert [level.name for level in cpu.runnable_levels(frozenset({"asimd"}))] == ["portable", "neon"]
    graviton3 = frozenset({"asimd", "asimddp", "i8mm"})
    assert [level.name for level in cpu.runnable_levels(graviton3)] == ["portable", "neon", "dotprod", "i8mm"]


def test_each_architecture_has_its_own_levels_and_the_portable_one():
    assert {level.architecture for level in levels_of("x86_64")} == {"any", "x86_64"}
    assert {level.architecture for level in levels_of("arm64")} == {"any", "aarch64"}
    assert levels_of("riscv64") == (PORTABLE,)
    assert len({level.name for level in LEVELS}) == len(LEVELS)


def test_this_cpus_features_are_read_and_its_best_level_is_one_it_runs():
    best = cpu.best_level()
    assert best in cpu.runnable_levels()
    assert best.needs <= cpu.cpu_features()


def test_every_lower_level_can_be_forced_and_is_then_in_use(forced_level):
    for level in cpu.runnable_levels():
        assert cpu.use_level(level.name) == level
        assert cpu.level_in_use() == level
        assert cpu.is_forced()
        assert os.environ[cpu.LEVEL_ENV] == level.name  # processes started now inherit it
    cpu.use_level(cpu.AUTO)
    assert cpu.level_in_use() == cpu.best_level() and not cpu.is_forced()
    assert cpu.LEVEL_ENV not in os.environ


def test_a_level_above_this_cpus_is_refused_naming_what_it_lacks(forced_level):
    above = [level for level in levels_of(cpu.machine()) if level not in cpu.runnable_levels()]
    other_architecture = [level for level in LEVELS if level.architecture not in ("any", cpu.machine())]
    for level in above + other_architecture:
        with pytest.raises(cpu.UnsupportedLevel, match=f"{level.name!r} cannot run here: this CPU"):
            cpu.use_level(level.name)
    assert cpu.level_in_use() == cpu.best_level()  # a refusal changes nothing


def test_an_unknown_level_lists_the_known_ones():
    with pytest.raises(cpu.UnsupportedLevel, match="the levels are auto, portable, avx2"):
        cpu.check_level("sse9")


def test_a_forced_level_reaches_a_child_process(forced_level):
    cpu.use_level("portable")
    code = "from tercet.native import cpu; print(cpu.level_in_use().name, cpu.is_forced())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["portable", "True"]


def test_the_log_line_says_which_level_and_why(forced_level):
    assert cpu.describe().startswith(f"{cpu.best_level().name} (") and "this CPU's best" in cpu.describe()
    cpu.use_level("portable")
    if cpu.best_level() != PORTABLE:
        assert cpu.describe().startswith("portable (") and "forced by model.cpu_isa" in cpu.describe()


def test_level_names_are_those_the_config_documents():
    assert level_named("avx2").flags == ("-march=x86-64-v3",)
    with pytest.raises(ValueError, match="unknown instruction-set level"):
        level_named("avx3")
