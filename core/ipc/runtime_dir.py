"""A server's private runtime directory (its ipc sockets), and cleaning up after a dead one.

A server removes its directory when it stops, but a main process killed by
SIGKILL (or the OOM killer) cannot, and its children die with it. Two things
clean up instead:

- a watcher, a tiny process started with the server, that waits for the end of
  a pipe only the main process holds and then removes the directory;
- a sweep at the next start, in case the watcher died too.

Both remove only what is provably a dead tercet server's: a ``tercet-*``
directory of this user, mode 0700, holding an owner file that names a process
that is gone (same pid and start time, so a reused pid does not count as
alive), and holding nothing but sockets, that owner file and the API workers'
metrics directory (holding nothing but prometheus_client's ``.db`` files);
anything else in it makes them leave it all alone.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
import time

logger = logging.getLogger(__name__)

PREFIX = "tercet-"
OWNER_FILE = "owner"
# Where several API workers keep their request metrics (tercet.metrics.shared_metrics).
SHARED_METRICS_DIR = "metrics"
# What makes an owner file tercet's, and which layout it describes.
OWNER_FORMAT = "tercet runtime dir 1"
# How long the watcher waits for its dead parent to finish exiting.
EXIT_WAIT_SECONDS = 10.0


def create_runtime_dir(parent_dir: str | None = None) -> str:
    """A new private directory, owned by this process (see :func:`write_owner`)."""
    runtime_dir = tempfile.mkdtemp(prefix=PREFIX, dir=parent_dir)
    os.chmod(runtime_dir, 0o700)
    write_owner(runtime_dir, os.getpid())
    return runtime_dir


def write_owner(runtime_dir: str, pid: int) -> None:
    owner = {"format": OWNER_FORMAT, "pid": pid, "start_time": process_start_time(pid)}
    path = os.path.join(runtime_dir, OWNER_FILE)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(owner, file)


def process_start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (Linux); None if unknown."""
    status = _proc_stat(pid)
    return None if status is None else int(status[19])


def is_process_gone(pid: int, start_time: int | None) -> bool:
    """Whether the process that was ``pid`` (started at ``start_time``) has ended.
    A zombie has ended; a process of another user, or one we cannot inspect, has not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    status = _proc_stat(pid)
    if status is None:  # no /proc: it exists, and that is all we know
        return False
    if start_time is not None and int(status[19]) != start_time:
        return True  # the pid now belongs to another process
    return status[0] in ("Z", "X")


def _proc_stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from the state field on (the name before it may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def read_owner(runtime_dir: str) -> dict | None:
    """The owner file's contents if ``runtime_dir`` is a tercet runtime directory
    of this user; None for anything else."""
    if not os.path.basename(runtime_dir).startswith(PREFIX):
        return None
    try:
        status = os.lstat(runtime_dir)
        if not (stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid()
                and stat.S_IMODE(status.st_mode) == 0o700):
            return None
        descriptor = os.open(os.path.join(runtime_dir, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor) as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            owner = json.loads(file.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict) or owner.get("format") != OWNER_FORMAT or not isinstance(owner.get("pid"), int):
        return None
    return owner


def remove_if_abandoned(runtime_dir: str) -> bool:
    """Remove ``runtime_dir`` if it is a tercet runtime directory whose owner is gone."""
    owner = read_owner(runtime_dir)
    if owner is None or not is_process_gone(owner["pid"], owner.get("start_time")):
        return False
    try:
        with os.scandir(runtime_dir) as entries:
            paths = [entry.path for entry in entries]
        if not all(_is_ours_to_remove(path) for path in paths):
            logger.warning("left the runtime directory of dead server %d in place: it holds more than sockets",
                           owner["pid"])
            return False
        for path in paths:
            _remove(path)
        os.rmdir(runtime_dir)
    except FileNotFoundError:  # another sweep got there first
        return not os.path.exists(runtime_dir)
    except OSError as error:
        logger.warning("left the runtime directory of dead server %d in place: %s", owner["pid"], error)
        return False
    return True


def _remove(path: str) -> None:
    if os.path.basename(path) == SHARED_METRICS_DIR:
        for name in os.listdir(path):
            os.unlink(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def _is_ours_to_remove(path: str) -> bool:
    mode = os.lstat(path).st_mode
    if os.path.basename(path) == SHARED_METRICS_DIR and stat.S_ISDIR(mode):
        return all(entry.is_file(follow_symlinks=False) and entry.name.endswith(".db") for entry in os.scandir(path))
    return os.path.basename(path) == OWNER_FILE or stat.S_ISSOCK(mode)


def sweep_abandoned_runtime_dirs(parent_dir: str | None = None) -> list[str]:
    """Remove the runtime directories of dead servers; the ones removed."""
    parent_dir = parent_dir or tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(parent_dir) if name.startswith(PREFIX)]
    except OSError:
        return []
    return [path for path in (os.path.join(parent_dir, name) for name in names) if remove_if_abandoned(path)]


class RuntimeDirWatcher:
    """A process that removes the runtime directory once this one is gone.

    It reads a pipe only this process holds, so the end of the pipe comes when
    this process ends, however it ends. It is no child with a death signal, so
    it outlives its parent for the moment the cleanup takes.
    """

    def __init__(self, runtime_dir: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tercet.ipc.runtime_dir", runtime_dir],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True,
        )

    def stop(self, timeout: float = 5.0) -> None:
        """On a clean stop (the directory is already removed): end the watcher."""
        self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def watch(runtime_dir: str) -> int:
    """The watcher process: wait for the parent to go, then remove its directory."""
    import signal

    # A Ctrl-C or SIGTERM sent to the whole process group must not stop the
    # watcher before the server it watches; the pipe's end ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    owner = read_owner(runtime_dir)
    if owner is None:
        return 0  # removed by the server itself, which is the usual end
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    # The pipe closes while the parent is still exiting; wait for it to be gone.
    while not is_process_gone(owner["pid"], owner.get("start_time")) and time.monotonic() < deadline:
        time.sleep(0.02)
    remove_if_abandoned(runtime_dir)
    return 0


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1]))
