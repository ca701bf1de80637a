"""Who can reach the IPC endpoints, and what happens to bytes that are not a message.

The ipc sockets live in a private 0700 directory, so another user cannot
connect to them; a process that can (the same user) still cannot make the
msgpack serializer build anything but a registered message; the tcp transport
binds loopback by default.
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import stat
import time

import httpx
import msgpack
import psutil
import pytest
from ipc_injection import endpoints, push

from tercet.testing import TINY_SETTINGS, wait_for_ranks

SHORT_BODY = {"text": "Count", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
FORGED_PROMPT_LENGTH = 40


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS)


def ipc_path(endpoint: str) -> str:
    assert endpoint.startswith("ipc://"), endpoint
    return endpoint[len("ipc://"):]


def prompt_tokens_admitted(server) -> int:
    ranks = httpx.get(server.base_url + "/get_server_info", timeout=30).json()["ranks"]
    return sum(rank["prompt_tokens_admitted"] for rank in ranks)


def forged_request_bytes(rid: str) -> bytes:
    """A valid edge-1 message, as the default serializer would encode it."""
    from tercet.config import TercetConfig
    from tercet.ipc.messages import TokenizedGenerateReq
    from tercet.processes.context import ProcessContext
    from tercet.sampling_params import SamplingParams

    serializer = ProcessContext.create(TercetConfig()).create_serializer()
    params = SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True, seed=1)
    return serializer.encode(TokenizedGenerateReq(rid, [1] * FORGED_PROMPT_LENGTH, params))


def run_as(user: str, function, *args) -> str:
    """``function(*args)`` in a forked child running as ``user``; its result (a str) or the error it raised.

    Forked rather than exec'd: the interpreter lives under /root, which other
    users cannot read, so a fresh one could not start as them.
    """
    entry = pwd.getpwnam(user)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, never return into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            try:
                result = f"ok {function(*args)}"
            except BaseException as error:
                result = f"error {type(error).__name__}: {error}"
            os.write(write_end, result.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def connect_unix(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(path)
    return "connected"


def test_runtime_dir_is_private_to_the_server_user(server):
    found = endpoints(server)
    runtime_dirs = {os.path.dirname(ipc_path(endpoint)) for names in found.values() for endpoint in names}
    assert len(runtime_dirs) == 1, runtime_dirs
    runtime_dir = runtime_dirs.pop()
    assert os.path.basename(runtime_dir).startswith("tercet-")
    status = os.stat(runtime_dir)
    assert stat.S_ISDIR(status.st_mode)
    assert stat.S_IMODE(status.st_mode) == 0o700
    assert status.st_uid == psutil.Process(server.process.pid).uids().effective
    # Every socket of the instance is inside it.
    for names in found.values():
        for endpoint in names:
            assert stat.S_ISSOCK(os.stat(ipc_path(endpoint)).st_mode), endpoint


def test_another_user_cannot_reach_the_scheduler_socket(server):
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user here")
    if os.geteuid() != 0:
        pytest.skip("switching to another user needs root")
    scheduler_endpoint = endpoints(server)["scheduler"][0]
    forged = forged_request_bytes("forged-by-nobody")
    admitted_before = prompt_tokens_admitted(server)

    # The socket file itself cannot even be opened by another user...
    outcome = run_as("nobody", connect_unix, ipc_path(scheduler_endpoint))
    assert outcome.startswith("error PermissionError"), outcome
    # ...so ZeroMQ, which connects lazily and retries, never gets a peer to deliver to.
    outcome = run_as("nobody", push, scheduler_endpoint, [forged], True)
    assert outcome == "ok ['not delivered']", outcome
    # By default ZeroMQ queues the message locally ("sent") and keeps retrying
    # the connection while it lingers; the scheduler still receives nothing.
    outcome = run_as("nobody", push, scheduler_endpoint, [forged], False)
    assert outcome == "ok ['sent']", outcome

    time.sleep(1.0)
    assert prompt_tokens_admitted(server) == admitted_before
    assert httpx.post(server.base_url + "/generate", json=SHORT_BODY, timeout=60).status_code == 200

    # Control: the very same bytes, from the server's own user, are a request the scheduler runs.
    admitted_before = prompt_tokens_admitted(server)
    assert push(scheduler_endpoint, [forged]) == ["sent"]
    wait_for_ranks(server.base_url, lambda ranks: sum(r["prompt_tokens_admitted"] for r in ranks)
                   == admitted_before + FORGED_PROMPT_LENGTH, timeout=10)


def test_bytes_that_are_not_a_registered_message_are_dropped_and_logged(server):
    found = endpoints(server)
    log_before = server.log().count("dropped an undecodable message")
    admitted_before = prompt_tokens_admitted(server)
    unknown_tag = msgpack.ExtType(1, msgpack.packb(["no.such.Message", 1, 2]))
    payloads = [
        b"\xc1 not msgpack at all",                                  # reserved msgpack byte
        msgpack.packb({"rid": "x", "input_ids": [1, 2, 3]}),        # plain data, not a message
        msgpack.packb(unknown_tag),                                  # an unregistered tag
        msgpack.packb(msgpack.ExtType(42, b"\x00")),                 # an unknown extension code
        msgpack.packb(msgpack.ExtType(1, msgpack.packb(["tercet.abort_req"]))),  # wrong field count
    ]
    # Each edge's receiver: scheduler (edge 1), detokenizer (edge 2), TokenizerManager (edge 3).
    targets = [found["scheduler"][0], found["detokenizer"][0], found["tokenizer"][0]]
    for endpoint in targets:
        assert push(endpoint, payloads) == ["sent"] * len(payloads)

    expected = log_before + len(payloads) * len(targets)
    deadline = time.monotonic() + 10
    while server.log().count("dropped an undecodable message") < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.log().count("dropped an undecodable message") == expected, server.log()[-4000:]

    assert server.process.poll() is None
    assert all(child.is_running() for child in server.child_processes())
    assert prompt_tokens_admitted(server) == admitted_before
    answer = httpx.post(server.base_url + "/generate", json=SHORT_BODY, timeout=60)
    assert answer.status_code == 200
    assert answer.json()["meta_info"]["completion_tokens"] == 8
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_tcp_endpoints_bind_loopback_by_default(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + ["ipc.transport=tcp"])
    try:
        found = [endpoint for names in endpoints(server).values() for endpoint in names]
        assert len(found) == 3
        ports = set()
        for endpoint in found:
            match = re.fullmatch(r"tcp://127\.0\.0\.1:(\d+)", endpoint)
            assert match, endpoint
            ports.add(int(match[1]))
        # What is actually listening on those ports, in the server or its children, is loopback only.
        processes = [psutil.Process(server.process.pid), *server.child_processes()]
        listening = {
            (conn.laddr.ip, conn.laddr.port)
            for process in processes
            for conn in process.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port in ports
        }
        assert {port for _, port in listening} == ports
        assert {ip for ip, _ in listening} == {"127.0.0.1"}
        assert httpx.post(server.base_url + "/generate", json=SHORT_BODY, timeout=60).status_code == 200
    finally:
        assert server.stop() == 0


def forged_messages() -> dict[str, list]:
    """Messages that decode cleanly on each edge but are wrong there: a type no
    handler takes, fields of the wrong types, values the scheduler cannot run."""
    from tercet.ipc.control_messages import ControlReply
    from tercet.ipc.messages import (
        AbortReq,
        BatchStrOutput,
        BatchTokenIDOutput,
        FinishReason,
        TokenizedGenerateReq,
    )
    from tercet.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=2, temperature=0, seed=1)
    str_output = BatchStrOutput(["nobody"], ["x"], [[1]], [None], [1], [1], [None], [None], [0])
    return {
        "scheduler": [
            FinishReason("stop"),                                            # no handler
            str_output,                                                      # no handler here
            TokenizedGenerateReq("forged-1", [1, 2], 5),                     # sampling_params an int
            AbortReq(7),                                                     # rid an int
            TokenizedGenerateReq("forged-2", [10**9], params),               # refused: not a token id
            TokenizedGenerateReq("forged-3", [1] * 100_000, params),         # refused: past the context
            TokenizedGenerateReq("forged-4", [1, 2], SamplingParams(temperature=-3.0, seed=1)),  # refused
        ],
        "detokenizer": [
            FinishReason("stop"),
            TokenizedGenerateReq("forged-5", [1, 2], params),
            BatchTokenIDOutput([1], [[1]], [None], [1], [1], [None], [None], [None], [0]),   # rids of ints
            BatchTokenIDOutput(["forged-6"], [[2**40]], [None], [1], [1], [None], [None], [None], [0]),  # undecodable id
        ],
        "tokenizer": [
            FinishReason("stop"),
            AbortReq("forged-7"),
            BatchStrOutput([5], ["x"], [[1]], [None], [1], [1], [None], [None], [0]),  # rids of ints
            str_output,                                                      # an unknown request: ignored
            ControlReply("no-such-request", 0, True),                        # nobody waits for it: ignored
        ],
    }


# What each process counts once the forged messages above are handled.
EXPECTED_COUNTS = {
    "scheduler": {"unhandled_message": 2, "malformed_message": 2},
    "detokenizer": {"unhandled_message": 2, "malformed_message": 1, "detokenizer": 1},
    "server": {"unhandled_message": 2, "malformed_message": 1},
}


def contained_counts(server) -> dict[str, dict]:
    info = httpx.get(server.base_url + "/get_server_info", timeout=30).json()
    return {
        "scheduler": info["ranks"][0]["contained_failures"]["by_kind"],
        "detokenizer": info["contained_failures"]["detokenizer"]["by_kind"],
        "server": info["contained_failures"]["server"]["by_kind"],
    }


def test_forged_messages_that_decode_are_dropped_or_refused_and_no_process_dies(start_server, tiny_llama_dir):
    from tercet.config import TercetConfig
    from tercet.processes.context import ProcessContext

    server = start_server(tiny_llama_dir, TINY_SETTINGS)
    serializer = ProcessContext.create(TercetConfig()).create_serializer()
    found = endpoints(server)
    children = server.child_processes()
    forged = forged_messages()
    for edge, messages in forged.items():
        assert push(found[edge][0], [serializer.encode(message) for message in messages]) == ["sent"] * len(messages)

    deadline = time.monotonic() + 30
    while contained_counts(server) != EXPECTED_COUNTS and time.monotonic() < deadline:
        time.sleep(0.1)
    assert contained_counts(server) == EXPECTED_COUNTS, server.log()[-4000:]
    log = server.log()
    assert "dropped a FinishReason from edge 1 (TokenizerManager -> scheduler)" in log
    assert "dropped a FinishReason from edge 2 (scheduler -> detokenizer)" in log
    assert "dropped a FinishReason from edge 3" in log
    assert "TokenizedGenerateReq.sampling_params: expected SamplingParams, got int" in log

    # Every process is the one that started, and the server serves.
    assert server.process.poll() is None
    assert [child.pid for child in server.child_processes()] == [child.pid for child in children]
    assert all(child.is_running() for child in children)
    answer = httpx.post(server.base_url + "/generate", json=SHORT_BODY, timeout=60)
    assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 8
    wait_for_ranks(server.base_url, lambda ranks: ranks[0]["num_running_requests"] == 0)
    assert sum(len(messages) for messages in forged.values()) == 16
    assert server.stop() == 0
