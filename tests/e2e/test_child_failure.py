"""A child that dies, at start-up or later, stops the whole server: non-zero exit, no process left."""

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil

from tercet.testing import TINY_SETTINGS, RunningServer


def gone(pids):
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_sigkill_of_the_scheduler_stops_the_server(tmp_path, tiny_llama_dir):
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS).wait_until_healthy()
    children = [child.pid for child in server.child_processes()]
    scheduler_pid = int(re.search(r"scheduler is ready \(pid (\d+)\)", server.log()).group(1))
    assert scheduler_pid in children
    killed = time.monotonic()
    os.kill(scheduler_pid, signal.SIGKILL)
    try:
        server.process.wait(timeout=15)
        took = time.monotonic() - killed
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert "scheduler process died (killed by signal SIGKILL)" in server.log()
    assert took < 5, f"the server took {took:.1f} s to exit after its scheduler died"
    print(f"\nexit {took:.2f} s after the scheduler's SIGKILL")
    deadline = time.monotonic() + 5
    while gone(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(children) == []


def test_watchdog_stops_the_server_when_a_scheduler_step_hangs(tmp_path, tiny_llama_dir):
    settings = TINY_SETTINGS + ["server.watchdog_timeout=2"]
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", settings).wait_until_healthy()
    scheduler_pid = int(re.search(r"scheduler is ready \(pid (\d+)\)", server.log()).group(1))
    model = httpx.get(server.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]
    body = {"model": model, "prompt": "Count", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            with client.stream("POST", "/v1/completions", json=body) as response:
                lines = response.iter_lines()
                next(line for line in lines if line.startswith("data: "))
                # Mid-generation: freeze the scheduler inside its busy loop.
                os.kill(scheduler_pid, signal.SIGSTOP)
                frozen = time.monotonic()
                rest = list(lines)
        server.process.wait(timeout=20)
        took = time.monotonic() - frozen
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert re.search(r"scheduler process died \(busy for [\d.]+ s without progress, over "
                     r"server.watchdog_timeout = 2 s; killed by the watchdog\)", server.log()), server.log()
    # The stream in flight was ended with an error, not left hanging.
    assert any("error" in line for line in rest), rest
    assert 2 <= took < 2 + 5, f"exit {took:.1f} s after the scheduler froze (watchdog_timeout = 2 s)"
    print(f"\nexit {took:.2f} s after the scheduler froze (watchdog_timeout = 2 s)")


def test_a_child_failing_at_start_up_is_named(tmp_path, tiny_llama_dir):
    broken_model = tmp_path / "broken-model"
    broken_model.mkdir()
    for name in os.listdir(tiny_llama_dir):
        if not name.endswith(".safetensors"):
            os.symlink(tiny_llama_dir / name, broken_model / name)
    server = RunningServer(broken_model, tmp_path / "server.log", TINY_SETTINGS)
    try:
        server.process.wait(timeout=120)
    finally:
        server.stop()
    assert server.process.returncode != 0
    assert "scheduler process failed" in server.log()


def test_a_missing_model_directory_is_a_clear_error(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "serve", "--model", str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode != 0
    assert "nowhere" in completed.stderr
