"""Runtime directories: who owns one, and removing only a dead server's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tercet.ipc.runtime_dir import (
    OWNER_FILE,
    SHARED_METRICS_DIR,
    RuntimeDirWatcher,
    create_runtime_dir,
    is_process_gone,
    process_start_time,
    read_owner,
    sweep_abandoned_runtime_dirs,
    write_owner,
)


def dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def bind_socket(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)


def abandoned_dir(parent) -> str:
    """A runtime directory as a SIGKILLed server leaves it: owner gone, sockets in place."""
    runtime_dir = create_runtime_dir(str(parent))
    os.unlink(os.path.join(runtime_dir, OWNER_FILE))
    write_owner(runtime_dir, dead_pid())
    bind_socket(os.path.join(runtime_dir, "scheduler_input_0"))
    return runtime_dir


def test_a_new_runtime_dir_is_private_and_names_its_owner(tmp_path):
    runtime_dir = create_runtime_dir(str(tmp_path))
    assert os.stat(runtime_dir).st_mode & 0o777 == 0o700
    owner = read_owner(runtime_dir)
    assert owner["pid"] == os.getpid() and owner["start_time"] == process_start_time(os.getpid())


def test_the_sweep_removes_a_dead_servers_dir_and_keeps_a_live_ones(tmp_path):
    abandoned = abandoned_dir(tmp_path)
    alive = create_runtime_dir(str(tmp_path))
    assert sweep_abandoned_runtime_dirs(str(tmp_path)) == [abandoned]
    assert not os.path.exists(abandoned) and os.path.exists(alive)


def test_the_sweep_removes_the_api_workers_metrics_files_too(tmp_path):
    abandoned = abandoned_dir(tmp_path)
    os.mkdir(os.path.join(abandoned, SHARED_METRICS_DIR))
    open(os.path.join(abandoned, SHARED_METRICS_DIR, "counter_123.db"), "w").close()
    assert sweep_abandoned_runtime_dirs(str(tmp_path)) == [abandoned]
    assert not os.path.exists(abandoned)


def test_a_reused_pid_does_not_keep_a_dir_alive():
    start_time = process_start_time(os.getpid())
    assert not is_process_gone(os.getpid(), start_time)
    assert is_process_gone(os.getpid(), start_time + 1)  # same pid, another process
    assert is_process_gone(dead_pid(), None)


def test_a_zombie_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while not is_process_gone(child.pid, None):  # exited, not yet reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert os.path.exists(f"/proc/{child.pid}")
    child.wait()


@pytest.mark.parametrize(
    "why, spoil",
    [
        ("not tercet's name", lambda path: os.rename(path, path.replace("tercet-", "other-"))),
        ("holds a file that is not a socket", lambda path: open(os.path.join(path, "notes.txt"), "w").close()),
        ("holds a metrics directory with more than metrics", lambda path: _metrics_dir_with(path, "notes.txt")),
        ("has no owner file", lambda path: os.unlink(os.path.join(path, OWNER_FILE))),
        ("the owner file is not tercet's", lambda path: _rewrite_owner(path, {"pid": 1})),
        ("another mode", lambda path: os.chmod(path, 0o755)),
    ],
)
def test_the_sweep_leaves_alone_what_is_not_provably_a_dead_servers(tmp_path, why, spoil):
    runtime_dir = abandoned_dir(tmp_path)
    spoil(runtime_dir)
    before = sorted(os.walk(tmp_path))
    assert sweep_abandoned_runtime_dirs(str(tmp_path)) == [], why
    assert sorted(os.walk(tmp_path)) == before


def test_the_sweep_does_not_follow_a_symlink(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    target = abandoned_dir(tmp_path / "elsewhere")
    os.symlink(target, tmp_path / "tercet-link")
    assert sweep_abandoned_runtime_dirs(str(tmp_path)) == []
    assert os.path.exists(target)


def _metrics_dir_with(runtime_dir: str, name: str) -> None:
    os.mkdir(os.path.join(runtime_dir, SHARED_METRICS_DIR))
    open(os.path.join(runtime_dir, SHARED_METRICS_DIR, name), "w").close()


def _rewrite_owner(runtime_dir: str, owner: dict) -> None:
    with open(os.path.join(runtime_dir, OWNER_FILE), "w") as file:
        json.dump(owner, file)


def test_the_watcher_removes_the_dir_once_its_owner_is_gone(tmp_path):
    # The owner is a process that starts the watcher and is then killed.
    script = (
        "import sys, os, time; from tercet.ipc.runtime_dir import create_runtime_dir, RuntimeDirWatcher;"
        "path = create_runtime_dir(sys.argv[1]); watcher = RuntimeDirWatcher(path);"
        "print(path, watcher.process.pid, flush=True); time.sleep(600)"
    )
    owner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    runtime_dir, watcher_pid = owner.stdout.readline().split()
    bind_socket(os.path.join(runtime_dir, "tokenizer"))
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 60
    while os.path.exists(runtime_dir):
        assert time.monotonic() < deadline, "the watcher never removed the runtime directory"
        time.sleep(0.02)
    while not is_process_gone(int(watcher_pid), None):
        assert time.monotonic() < deadline, "the watcher never exited"
        time.sleep(0.02)


def test_a_watcher_stopped_cleanly_leaves_nothing(tmp_path):
    runtime_dir = create_runtime_dir(str(tmp_path))
    watcher = RuntimeDirWatcher(runtime_dir)
    os.unlink(os.path.join(runtime_dir, OWNER_FILE))
    os.rmdir(runtime_dir)
    watcher.stop()
    assert watcher.process.returncode == 0
