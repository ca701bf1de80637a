"""IPC round-trip benchmark: typed messages over real ZeroMQ sockets between two processes.

A spawned echo process receives each message on a PULL socket it binds and
sends it back on a PUSH socket it connects, through the same
``MessageSender``/``MessageReceiver`` channels, serializer plugins and
transport plugins (``PortArgs`` endpoints) the server uses. The benchmark
process sends one message, waits for its echo, and repeats: one message in
flight, so each round trip is two encodes, two decodes and two socket hops.
Two realistic messages are measured: a 512-token ``TokenizedGenerateReq``
(edge 1) and the ``BatchTokenIDOutput`` of one decode step of 32 requests
(edge 2).

    python -m tercet.bench.ipc_roundtrip [--serializers msgpack pickle] [--transports ipc tcp] [--num-messages 2000] [--json]
"""

from __future__ import annotations

import multiprocessing
import sys
import time

import zmq

from tercet.config import load_config
from tercet.errors import TercetError
from tercet.ipc.channels import MessageReceiver, MessageSender
from tercet.ipc.messages import BatchTokenIDOutput, TokenizedGenerateReq
from tercet.ipc.port_args import PortArgs
from tercet.processes.context import ProcessContext
from tercet.sampling_params import SamplingParams

MESSAGE_KINDS = ("generate_req", "decode_step")
# Round trips before the timed ones: connections settle, code paths warm up.
NUM_WARMUP = 50
# Longest wait for one echo before the benchmark gives up (the echo process died, say).
ECHO_TIMEOUT_MS = 10_000


def sample_message(kind: str):
    if kind == "generate_req":
        params = SamplingParams(max_new_tokens=256, temperature=0.7, top_p=0.95, seed=1234, stop=["\n\n"])
        return TokenizedGenerateReq("0f1e2d3c4b5a69788796a5b4c3d2e1f0", list(range(1000, 1512)), params, stream=True)
    if kind == "decode_step":
        num_requests = 32
        return BatchTokenIDOutput(
            rids=[f"{index:032x}" for index in range(num_requests)],
            new_token_ids=[[20_000 + index] for index in range(num_requests)],
            finished_reasons=[None] * num_requests,
            prompt_tokens=[512] * num_requests,
            completion_tokens=[40] * num_requests,
            detokenize_params=[None] * num_requests,
            output_logprobs=[None] * num_requests,
            prompt_logprobs=[None] * num_requests,
            cached_tokens=[0] * num_requests,
        )
    raise TercetError(f"unknown message kind {kind!r}; available: {', '.join(MESSAGE_KINDS)}")


def _context() -> ProcessContext:
    return ProcessContext.create(load_config(environ={}))


def _serializer(context: ProcessContext, name: str):
    return context.registries.serializers.get(name)(context.message_registry)


def _echo_process(control) -> None:
    """Echo every message of each session the parent opens, until it sends ``None``."""
    from tercet.processes.context import die_with_parent

    die_with_parent()
    context = _context()
    zmq_context = zmq.Context()
    while (session := control.recv()) is not None:
        serializer_name, inbound, outbound, num_echoes = session
        serializer = _serializer(context, serializer_name)
        receiver = MessageReceiver(zmq_context, inbound, serializer, bind=True)
        sender = MessageSender(zmq_context, outbound, serializer)
        control.send("ready")
        echoed = 0
        while echoed < num_echoes:
            receiver.poll(timeout_ms=None)
            for message in receiver.receive_pending():
                sender.send(message)
                echoed += 1
        receiver.close()
        sender.close()
    zmq_context.term()


class EchoPeer:
    """The spawned echo process and the pipe that opens its sessions."""

    def __init__(self):
        spawn = multiprocessing.get_context("spawn")
        self.control, child_end = spawn.Pipe()
        self.process = spawn.Process(target=_echo_process, args=(child_end,), name="tercet-bench-echo", daemon=True)
        self.process.start()
        child_end.close()

    def open_session(self, serializer: str, inbound: str, outbound: str, num_echoes: int) -> None:
        self.control.send((serializer, inbound, outbound, num_echoes))
        if not self.control.poll(ECHO_TIMEOUT_MS / 1000):
            raise TercetError("the echo process did not open its sockets in time")
        self.control.recv()

    def close(self) -> None:
        try:
            self.control.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


def measure(peer: EchoPeer, context: ProcessContext, serializer_name: str, transport_name: str,
            kind: str, num_messages: int) -> dict:
    serializer = _serializer(context, serializer_name)
    transport = context.registries.transports.get(transport_name)(context.config.ipc)
    message = sample_message(kind)
    port_args = PortArgs.create(transport)
    zmq_context = zmq.Context()
    # Like edges 1 and 3: each side binds where it receives and connects where it sends.
    receiver = MessageReceiver(zmq_context, port_args.tokenizer_input, serializer, bind=True)
    try:
        peer.open_session(serializer_name, port_args.scheduler_input, port_args.tokenizer_input, NUM_WARMUP + num_messages)
        sender = MessageSender(zmq_context, port_args.scheduler_input, serializer)
        try:
            for _ in range(NUM_WARMUP):
                echo = _round_trip(sender, receiver, message)
            if echo != message:
                raise TercetError(f"the echo of a {type(message).__name__} came back different")
            round_trips_ns = []
            started = time.perf_counter_ns()
            for _ in range(num_messages):
                sent = time.perf_counter_ns()
                _round_trip(sender, receiver, message)
                round_trips_ns.append(time.perf_counter_ns() - sent)
            elapsed_s = (time.perf_counter_ns() - started) / 1e9
        finally:
            sender.close()
    finally:
        receiver.close()
        zmq_context.term()
        port_args.remove_runtime_dir()
    encoded = serializer.encode(message)
    return {
        "serializer": serializer_name, "transport": transport_name, "message": kind,
        "message_type": type(message).__name__, "message_bytes": len(encoded),
        "num_round_trips": num_messages,
        "round_trips_per_s": num_messages / elapsed_s,
        # Each round trip carries the message twice, once each way.
        "messages_per_s": 2 * num_messages / elapsed_s,
        **_latency_us(round_trips_ns),
        "encode_us": _mean_call_us(lambda: serializer.encode(message)),
        "decode_us": _mean_call_us(lambda: serializer.decode(encoded)),
    }


def _round_trip(sender: MessageSender, receiver: MessageReceiver, message):
    sender.send(message)
    if not receiver.poll(timeout_ms=ECHO_TIMEOUT_MS):
        raise TercetError(f"no echo within {ECHO_TIMEOUT_MS / 1000:.0f}s; did the echo process die?")
    (echo,) = receiver.receive_pending()
    return echo


def _latency_us(samples_ns: list[int]) -> dict:
    ordered = sorted(samples_ns)

    def percentile(p: int) -> float:
        return ordered[max(0, -(-len(ordered) * p // 100) - 1)] / 1000  # nearest rank

    return {
        "mean_us": sum(ordered) / len(ordered) / 1000,
        "p50_us": percentile(50),
        "p99_us": percentile(99),
        "min_us": ordered[0] / 1000,
        "max_us": ordered[-1] / 1000,
    }


def _mean_call_us(call, repeats: int = 200) -> float:
    started = time.perf_counter_ns()
    for _ in range(repeats):
        call()
    return (time.perf_counter_ns() - started) / repeats / 1000


def run_ipc_benchmark(serializers=("msgpack", "pickle"), transports=("ipc",), num_messages: int = 2000,
                      *, message_kinds=MESSAGE_KINDS, progress: bool = True) -> dict:
    """Round trips for every serializer x transport x message kind; a JSON-able dict."""
    if num_messages < 1:
        raise TercetError(f"num_messages must be at least 1, got {num_messages}")
    context = _context()
    for name in serializers:
        context.registries.serializers.get(name)  # unknown names fail before any process starts
    for name in transports:
        context.registries.transports.get(name)
    for kind in message_kinds:
        sample_message(kind)
    results = []
    peer = EchoPeer()
    try:
        for transport in transports:
            for serializer in serializers:
                for kind in message_kinds:
                    results.append(measure(peer, context, serializer, transport, kind, num_messages))
                    if progress:
                        print(f"[bench] ipc: {serializer} over {transport}, {kind}: "
                              f"{results[-1]['round_trips_per_s']:.0f} round trips/s", file=sys.stderr, flush=True)
    finally:
        peer.close()
    return {
        "config": {"serializers": list(serializers), "transports": list(transports),
                   "message_kinds": list(message_kinds), "num_messages": num_messages, "num_warmup": NUM_WARMUP,
                   "zmq": zmq.zmq_version(), "pyzmq": zmq.__version__},
        "results": results,
    }


def format_ipc_report(result: dict) -> str:
    config = result["config"]
    lines = [
        f"IPC round trips: {config['num_messages']} per row, one in flight, two processes (ZeroMQ {config['zmq']})",
        (f"{'serializer':10} {'transport':9} {'message':12} {'bytes':>7} {'round trips/s':>14} {'msgs/s':>9} "
         f"{'mean us':>8} {'p50 us':>8} {'p99 us':>8} {'enc us':>7} {'dec us':>7}"),
    ]
    for row in result["results"]:
        lines.append(
            f"{row['serializer']:10} {row['transport']:9} {row['message']:12} {row['message_bytes']:>7} "
            f"{row['round_trips_per_s']:>14.0f} {row['messages_per_s']:>9.0f} {row['mean_us']:>8.1f} "
            f"{row['p50_us']:>8.1f} {row['p99_us']:>8.1f} {row['encode_us']:>7.1f} {row['decode_us']:>7.1f}"
        )
    return "\n".join(lines)
