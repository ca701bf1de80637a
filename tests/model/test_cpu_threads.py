"""The CPU thread count follows the cores other processes leave free."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tercet.model.cpu_threads import CpuThreads, CpuUsage, read_cpu_usage, threads_for

TWO_CPUS = frozenset({0, 1})


class FakeMachine:
    """Cumulative usage readings that the test moves on: others' busy cores and our own."""

    def __init__(self):
        self.now = 0.0
        self.cores_busy_s = 0.0
        self.own_s = 0.0
        self.threads_set: list[int] = []

    def read(self, cpus):
        return CpuUsage(self.cores_busy_s, self.own_s, self.now)

    def run(self, seconds: float, others_cores: float, own_cores: float) -> None:
        self.now += seconds
        self.own_s += own_cores * seconds
        self.cores_busy_s += (others_cores + own_cores) * seconds


def keeper(machine: FakeMachine, configured: int = 0, current: int = 2) -> CpuThreads:
    return CpuThreads(configured, machine.threads_set.append, current, cpus=TWO_CPUS, read_usage=machine.read,
                      clock=lambda: machine.now)


@pytest.mark.parametrize("others, expected", [(0.0, 2), (0.3, 2), (0.9, 1), (1.0, 1), (1.7, 1), (2.0, 1)])
def test_the_threads_are_the_cores_left_and_at_least_one(others, expected):
    assert threads_for(2, others) == expected


def test_a_busy_neighbour_takes_a_thread_and_gives_it_back_when_it_stops():
    machine = FakeMachine()
    threads = keeper(machine)
    machine.run(1.5, others_cores=1.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == [1]
    machine.run(1.5, others_cores=1.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == [1]  # nothing changes while the neighbour stays
    machine.run(1.5, others_cores=0.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == [1, 2]


def test_it_looks_at_most_once_an_interval():
    machine = FakeMachine()
    threads = keeper(machine)
    machine.run(0.5, others_cores=1.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == []
    machine.run(0.6, others_cores=1.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == [1]


def test_our_own_use_is_not_counted_as_others():
    machine = FakeMachine()
    threads = keeper(machine)
    machine.run(2.0, others_cores=0.1, own_cores=2.0)
    threads.check()
    assert machine.threads_set == []


def test_a_configured_count_is_used_as_it_is_and_never_changed():
    machine = FakeMachine()
    threads = keeper(machine, configured=1)
    assert machine.threads_set == [1]
    machine.run(5.0, others_cores=0.0, own_cores=1.0)
    threads.check()
    assert machine.threads_set == [1]


def test_the_real_readings_are_seconds_of_this_machine():
    cpus = frozenset(os.sched_getaffinity(0))
    first = read_cpu_usage(cpus)
    sum(range(3_000_000))  # some work of our own
    second = read_cpu_usage(cpus)
    assert first is not None and second is not None
    assert second.own_s > first.own_s and second.at_s > first.at_s
    assert second.cores_busy_s >= first.cores_busy_s


# Run in a fresh process: MKL reads its mode at its first matmul.
_MATMULS_AT_ONE_AND_TWO_THREADS = """
import os, sys
os.environ.pop("MKL_CBWR", None)
from tercet.model.cpu_threads import same_results_at_any_thread_count
same_results_at_any_thread_count()
import torch, torch.nn.functional as F
torch.manual_seed(0)
different = []
for rows, k, n in ((8, 384, 1152), (128, 1536, 576), (3, 576, 1536)):
    x, w, b = torch.randn(rows, k), torch.randn(n, k), torch.randn(n)
    results = []
    for threads in (2, 1):
        torch.set_num_threads(threads)
        results.append(F.linear(x, w, b))
    if not torch.equal(*results):
        different.append((rows, k, n))
print(os.environ["MKL_CBWR"], different)
"""


def test_matmuls_give_the_same_bits_at_one_thread_and_at_two():
    done = subprocess.run([sys.executable, "-c", _MATMULS_AT_ONE_AND_TWO_THREADS], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split("\n")[0] == "AUTO,STRICT []"


def test_openmp_workers_spin_through_a_step_unless_the_user_chose(monkeypatch):
    from tercet.model.cpu_threads import WORKERS_SPIN, workers_wait_awake_through_a_step

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    workers_wait_awake_through_a_step()
    assert os.environ["GOMP_SPINCOUNT"] == WORKERS_SPIN[1]
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    workers_wait_awake_through_a_step()
    assert os.environ["GOMP_SPINCOUNT"] == "5"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the user's policy: no spin count of ours over it
    workers_wait_awake_through_a_step()
    assert "GOMP_SPINCOUNT" not in os.environ


def test_the_scheduler_process_sets_it_before_torch_loads_openmp():
    # OpenMP reads GOMP_SPINCOUNT once, as torch loads it: by the time the scheduler's entry hands over to
    # the child's set-up (which loads torch), the setting must be in place and torch not yet loaded.
    check = """
import os, sys, types
import tercet.scheduler.process as entry
seen = {}
entry.set_process_title = lambda title: None
entry.run_child = lambda *args, **kwargs: seen.update(spin=os.environ.get("GOMP_SPINCOUNT"), torch="torch" in sys.modules)
config = types.SimpleNamespace(scheduler=types.SimpleNamespace(dp_size=1), parallel=types.SimpleNamespace(tp_size=1),
                               model=types.SimpleNamespace(cpu_isa="auto"))
entry.run_scheduler_process(config, None, 0, None, 0, None)
assert seen == {"spin": "30000000", "torch": False}, seen
"""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    subprocess.run([sys.executable, "-c", check], check=True, env=environment)


def test_a_forced_level_holds_torchs_kernels_there_before_torch_loads():
    # ATen and oneDNN read their ISA limits once, as torch loads: a scheduler forced below the CPU's best
    # level must set them first, so that torch's own kernels (oneDNN's bfloat16 packing) act as on such a CPU.
    from tercet.native.cpu import best_level, runnable_levels

    if "avx2" not in [level.name for level in runnable_levels()] or best_level().name == "avx2":
        pytest.skip(f"this CPU runs no avx2 level below its best ({best_level().name})")
    check = f"""
import os, sys, types
import tercet.scheduler.process as entry
seen = {{}}
entry.set_process_title = lambda title: None
entry.run_child = lambda *args, **kwargs: seen.update(onednn=os.environ.get("ONEDNN_MAX_CPU_ISA"),
                                                     aten=os.environ.get("ATEN_CPU_CAPABILITY"),
                                                     torch="torch" in sys.modules)
config = types.SimpleNamespace(scheduler=types.SimpleNamespace(dp_size=1), parallel=types.SimpleNamespace(tp_size=1),
                               model=types.SimpleNamespace(cpu_isa="avx2"))
entry.run_scheduler_process(config, None, 0, None, 0, None)
assert seen == {{"onednn": "AVX2", "aten": "avx2", "torch": False}}, seen
"""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "TERCET_CPU_ISA")}
    subprocess.run([sys.executable, "-c", check], check=True, env=environment)
