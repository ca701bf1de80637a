"""Hostile frames on every edge of a live server: whatever the bytes, every process lives and serves.

Each frame goes to all three receivers (the scheduler, edge 1; the detokenizer,
edge 2; the TokenizerManager, edge 3): arbitrary bytes, and msgpack that is
well formed but hostile, nesting arrays, maps or messages (extension values)
thousands deep or declaring lengths of gigabytes in a few bytes. 300 nested
messages in 6.6 KB used to overflow the decoder's stack and kill the receiving
process. The only pass: every frame is dropped and counted, no process dies,
and the server still answers a request.
"""

from __future__ import annotations

import struct
import time
from collections import Counter

import httpx
import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ipc_injection import endpoints, push

from tercet.testing import TINY_SETTINGS, wait_for_ranks

# A small frame limit for this server, so an oversized frame is cheap to send.
MAX_MESSAGE_BYTES = 1024 * 1024
DROP_KINDS = ("undecodable_message", "message_over_limits", "malformed_message", "unhandled_message")
SHORT_BODY = {"text": "Count", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
TAGS = ("tercet.abort_req", "tercet.tokenized_generate_req", "tercet.batch_str_output", "tercet.sampling_params",
        "no.such.tag")


def message(tag: str, *fields) -> bytes:
    """A message as the msgpack serializer writes one: an extension value holding [tag, fields...]."""
    return msgpack.packb(msgpack.ExtType(1, msgpack.packb([tag, *fields])))


def nested_messages(depth: int, tag: str) -> bytes:
    frame = message(tag, "x")
    for _ in range(depth):
        frame = msgpack.packb(msgpack.ExtType(1, b"\x92" + msgpack.packb(tag) + frame))
    return frame


def nested_containers(depth: int, level: bytes, leaf: bytes) -> bytes:
    """``level`` opens one container around the next (a one-element array, a one-key map)."""
    return level * depth + leaf


def huge_length(header: int, length: int, rest: bytes) -> bytes:
    """A str/bin/array/map/ext header declaring ``length`` items or bytes, followed by a few."""
    return bytes([header]) + struct.pack(">I", length) + rest


DEEP_CONTAINERS = st.builds(
    nested_containers, st.integers(65, 5000), st.sampled_from([b"\x91", b"\x81\xa1k", b"\x92\x00"]),
    st.sampled_from([b"\x00", b"\xc0", message("tercet.abort_req", "x")]),
)
DEEP_MESSAGES = st.builds(nested_messages, st.integers(17, 1200), st.sampled_from(TAGS))
HUGE_LENGTHS = st.builds(
    huge_length, st.sampled_from([0xDB, 0xC6, 0xDD, 0xDF, 0xC9]), st.integers(2**16, 2**32 - 1),
    st.binary(max_size=64),
)
# Hostile parts inside a message that is otherwise well formed (never arbitrary bytes
# there: a few, such as an empty string, would make a valid message).
INSIDE_A_MESSAGE = st.builds(
    lambda tag, inner: msgpack.packb(msgpack.ExtType(1, b"\x92" + msgpack.packb(tag) + inner)),
    st.sampled_from(TAGS), st.one_of(DEEP_CONTAINERS, HUGE_LENGTHS),
)
HOSTILE_FRAMES = st.one_of(st.binary(max_size=4096), DEEP_CONTAINERS, DEEP_MESSAGES, HUGE_LENGTHS, INSIDE_A_MESSAGE)

# Sent once each, besides what hypothesis draws: the frame that crashed every receiver, and one over the size limit.
KNOWN_FRAMES = [
    nested_messages(300, "tercet.abort_req"),
    message("tercet.abort_req", b"\x00" * MAX_MESSAGE_BYTES),
]


def dropped_counts(server) -> Counter:
    info = httpx.get(server.base_url + "/get_server_info", timeout=30).json()
    by_process = {
        "scheduler": info["ranks"][0]["contained_failures"]["by_kind"],
        "detokenizer": info["contained_failures"]["detokenizer"]["by_kind"],
        "tokenizer": info["contained_failures"]["server"]["by_kind"],
    }
    return Counter({edge: sum(counts.get(kind, 0) for kind in DROP_KINDS) for edge, counts in by_process.items()})


def wait_until_dropped(server, processes, expected: Counter) -> None:
    """Wait on every receiver's drop counts; fail at once if a process is gone."""
    deadline = time.monotonic() + 120
    while True:
        assert server.process.poll() is None, server.log()[-4000:]
        assert all(process.is_running() for process in processes), server.log()[-4000:]
        counts = dropped_counts(server)
        if counts == expected:
            return
        assert time.monotonic() < deadline, (counts, expected)
        time.sleep(0.05)


def test_hostile_frames_on_every_edge_are_dropped_and_no_process_dies(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + [f"ipc.max_message_bytes={MAX_MESSAGE_BYTES}"])
    receivers = {edge: found[0] for edge, found in endpoints(server).items()}
    processes = server.child_processes()
    expected = dropped_counts(server)

    def send_to_every_edge(frames: list[bytes]) -> None:
        for edge, endpoint in receivers.items():
            assert push(endpoint, frames) == ["sent"] * len(frames)
            expected[edge] += len(frames)
        wait_until_dropped(server, processes, expected)

    @settings(max_examples=50, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(HOSTILE_FRAMES, min_size=1, max_size=6))
    def send_drawn_frames(frames):
        send_to_every_edge(frames)

    send_to_every_edge(KNOWN_FRAMES)
    send_drawn_frames()

    # The same processes as at the start, and the server serves.
    died = [process.pid for process in processes if not process.is_running()]
    assert server.process.poll() is None and died == []
    assert [child.pid for child in server.child_processes()] == [process.pid for process in processes]
    answer = httpx.post(server.base_url + "/generate", json=SHORT_BODY, timeout=60)
    assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 8
    wait_for_ranks(server.base_url, lambda ranks: ranks[0]["num_running_requests"] == 0)
    log = server.log()
    assert "dropped a message over the decode limits" in log
    print(f"hostile frames sent: {sum(expected.values())} (per receiver: {dict(expected)}); processes that died: {len(died)}")
    assert server.stop() == 0
