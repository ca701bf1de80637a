"""Two network namespaces joined by a veth pair: two "hosts" on one machine, for multi-node tests.

Each namespace has only its loopback and one end of the pair, with an
address of its own on a private /24, so traffic between the nodes can only go
over those addresses. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); created
for a test and removed after it (removing a namespace removes its veth end and
the pair with it).

A process is started in a namespace with ``ip netns exec``; this process
talks into one from a thread that has entered it (``setns`` moves only the
calling thread), so HTTP clients run there.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import shutil
import subprocess

CLONE_NEWNET = 0x40000000


def can_create_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


class NetworkNamespaces:
    def __init__(self, tag: str):
        # Names and the subnet from the pid, so concurrent test runs do not collide.
        self.names = (f"tercet-{tag}-{os.getpid()}-a", f"tercet-{tag}-{os.getpid()}-b")
        subnet = f"10.{100 + os.getpid() % 100}.{os.getpid() // 100 % 250}"
        self.addresses = (f"{subnet}.1", f"{subnet}.2")
        self.devices = (f"tv{os.getpid() % 100000}a", f"tv{os.getpid() % 100000}b")
        self.executors: dict[int, concurrent.futures.ThreadPoolExecutor] = {}

    def __enter__(self) -> "NetworkNamespaces":
        try:
            for name in self.names:
                _ip("netns", "add", name)
            _ip("link", "add", self.devices[0], "type", "veth", "peer", "name", self.devices[1])
            for index, (name, device, address) in enumerate(zip(self.names, self.devices, self.addresses)):
                _ip("link", "set", device, "netns", name)
                _ip("-n", name, "addr", "add", f"{address}/24", "dev", device)
                _ip("-n", name, "link", "set", device, "up")
                _ip("-n", name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        for executor in self.executors.values():
            executor.shutdown(wait=True)
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)

    def command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run inside namespace ``index``."""
        return ["ip", "netns", "exec", self.names[index], *argv]

    def call_in(self, index: int, function, *args, **kwargs):
        """``function(*args, **kwargs)`` on a thread inside namespace ``index``: its sockets are there."""
        if index not in self.executors:
            self.executors[index] = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, initializer=_enter, initargs=(self.names[index],)
            )
        return self.executors[index].submit(function, *args, **kwargs).result()

    def tcp_connections(self, index: int) -> list[tuple[str, str]]:
        """``(local, peer)`` addresses (without ports) of every established TCP connection in the namespace."""
        listing = subprocess.run(self.command(index, ["ss", "-tnH", "state", "established"]),
                                 capture_output=True, text=True, check=True).stdout
        connections = []
        for line in listing.splitlines():
            fields = line.split()
            local, peer = fields[-2], fields[-1]
            connections.append((_host_of(local), _host_of(peer)))
        return connections


def _host_of(address_and_port: str) -> str:
    host = address_and_port.rpartition(":")[0].strip("[]")
    return host.removeprefix("::ffff:")


def _enter(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/var/run/netns/{name}") as namespace:
        if libc.setns(namespace.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name} failed")


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], capture_output=True, text=True, check=True)
