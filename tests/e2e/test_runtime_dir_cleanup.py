"""A main process killed with SIGKILL leaves no runtime directory behind (issue 12, item 7).

Its watcher removes the directory at once; if the watcher died too, the next
server to start sweeps it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil

from tercet.testing import TINY_SETTINGS, RunningServer


def runtime_dir_of(server: RunningServer) -> str:
    match = re.search(r"IPC endpoints: scheduler ipc://(\S+)/scheduler_input_0", server.log())
    assert match, server.log()
    return match[1]


def wait_until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def is_gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigkill_of_the_main_process_removes_its_runtime_dir(tmp_path, monkeypatch, tiny_llama_dir):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the server's runtime dir goes here, apart from others'
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS).wait_until_healthy()
    try:
        runtime_dir = runtime_dir_of(server)
        assert os.path.dirname(runtime_dir) == str(tmp_path)
        assert any(name.startswith("scheduler_input") for name in os.listdir(runtime_dir))
        children = server.child_processes()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(60)
        wait_until(lambda: not os.path.exists(runtime_dir), f"{runtime_dir} is still there")
        wait_until(lambda: all(is_gone(child) for child in children), "a child outlived the server")
    finally:
        server.stop()


def test_the_next_start_sweeps_a_dead_servers_runtime_dir(tmp_path, monkeypatch, tiny_llama_dir):
    """What a server leaves when its watcher is killed with it (the OOM killer
    taking the process group, say): its sockets and owner file."""
    from tercet.ipc.runtime_dir import OWNER_FILE, create_runtime_dir, write_owner

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = create_runtime_dir(str(tmp_path))
    os.unlink(os.path.join(abandoned, OWNER_FILE))
    write_owner(abandoned, int(finished.stdout))
    with socket.socket(socket.AF_UNIX) as left_behind:
        left_behind.bind(os.path.join(abandoned, "scheduler_input_0"))
    # Not tercet's to remove: a directory without an owner file, under the same prefix.
    foreign = tmp_path / "tercet-not-a-runtime-dir"
    foreign.mkdir(mode=0o700)
    (foreign / "scheduler_input_0").write_text("keep me")

    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", TINY_SETTINGS).wait_until_healthy()
    try:
        assert not os.path.exists(abandoned)
        assert f"removed {abandoned}, left behind by a server that is gone" in server.log()
        assert (foreign / "scheduler_input_0").read_text() == "keep me"
        assert os.path.isdir(runtime_dir_of(server))
    finally:
        assert server.stop() == 0
    assert not os.path.exists(runtime_dir_of(server))
