"""Reaching a live server's IPC sockets from a test: their endpoints, and pushing raw frames to them."""

from __future__ import annotations

import re
import time

import zmq

ENDPOINTS_LINE = re.compile(r"IPC endpoints: scheduler (?P<schedulers>.+?), detokenizer (?P<detokenizer>\S+), tokenizer (?P<tokenizer>\S+)")


def endpoints(server) -> dict[str, list[str]]:
    """Each receiver's endpoints, from the server's start-up log line: scheduler (edge 1),
    detokenizer (edge 2), tokenizer (the TokenizerManager, edge 3)."""
    match = ENDPOINTS_LINE.search(server.log())
    assert match, server.log()
    return {
        "scheduler": match["schedulers"].split(", "),
        "detokenizer": [match["detokenizer"]],
        "tokenizer": [match["tokenizer"]],
    }


def push(endpoint: str, payloads: list[bytes], immediate: bool = True, wait: float = 2.0) -> list[str]:
    """Connect a ZeroMQ PUSH to ``endpoint`` and try to send each payload without
    blocking; what happened to each: ``sent`` or ``not delivered``.

    With ``immediate`` a message is only queued once a peer is connected;
    without it ZeroMQ queues it at once and delivers it if a connection ever
    succeeds (its default, which is what a naive injector gets)."""
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.setsockopt(zmq.IMMEDIATE, int(immediate))
    try:
        sock.connect(endpoint)
        outcomes = []
        for payload in payloads:
            deadline = time.monotonic() + wait
            while True:
                try:
                    sock.send(payload, zmq.NOBLOCK)
                    outcomes.append("sent")
                    break
                except zmq.Again:  # no peer connected
                    if time.monotonic() > deadline:
                        outcomes.append("not delivered")
                        break
                    time.sleep(0.05)
        return outcomes
    finally:
        sock.close()
        context.term()
