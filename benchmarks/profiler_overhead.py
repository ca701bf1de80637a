"""What recording a torch profile (POST /start_profile) costs a loaded server: the c=32 workload with and without one.

    python3 benchmarks/profiler_overhead.py [--rounds 3] [--num-prompts 128] [--json-out /tmp/profiler_overhead.json]
    python3 benchmarks/profiler_overhead.py --quick   # only checks that the script runs (tiny sizes)

One server (the default model, unless ``--model``) is started here with ``[server] profile_dir`` in a
temporary directory, warmed up, then loaded with ``tercet bench``'s workload (``--input-len`` 128 in,
``--output-len`` 128 out, greedy, streamed) at ``--concurrency`` 32, ``--rounds`` times in each of two
ways, alternated so that a drift of the machine weighs on both alike:

- ``off``: no profile;
- ``recording``: ``POST /start_profile`` (open-ended, ``--activities``) just before the load and
  ``POST /stop_profile`` just after; the stop's duration (writing the traces) and the traces' sizes
  are reported beside it, since requests arriving meanwhile wait for the write.

Reported per way: output tokens/s, TTFT p50/p99 and inter-token latency p50 (medians over the rounds),
and the recording's cost as ratios to ``off``. Every figure here is a timing: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tercet.bench.serving import BenchConfig, run_serving_benchmark
from tercet.bench.summary import summarize
from tercet.testing.running_server import RunningServer


def start_server(model: str | None, concurrency: int, profile_dir: Path, log_path: Path) -> RunningServer:
    settings = [f"scheduler.max_running_requests={concurrency}", f"server.profile_dir={profile_dir}"]
    server = RunningServer(Path(model) if model else None, log_path, settings)
    return server.wait_until_healthy(timeout=900)


def one_load(server: RunningServer, arguments, seed: int) -> dict:
    config = BenchConfig(base_url=server.base_url, num_prompts=arguments.num_prompts, input_len=arguments.input_len,
                         output_len=arguments.output_len, concurrency=arguments.concurrency, seed=seed,
                         tokenizer=arguments.model)
    run = run_serving_benchmark(config, progress_stream=open(os.devnull, "w"))
    summary = summarize(run.outcomes, run.duration_s)
    if summary.failed:
        raise RuntimeError(f"{summary.failed} requests failed: {summary.errors}")
    return {"output_tokens_per_s": summary.output_tokens_per_s, "ttft_p50_ms": summary.ttft.p50,
            "ttft_p99_ms": summary.ttft.p99, "itl_p50_ms": summary.itl.p50 if summary.itl else None}


def recorded_load(server: RunningServer, arguments, seed: int, round_index: int) -> dict:
    body = {"output_dir": f"round-{round_index}", "activities": arguments.activities}
    started = httpx.post(server.base_url + "/start_profile", json=body, timeout=60)
    started.raise_for_status()
    figures = one_load(server, arguments, seed)
    stop_start = time.perf_counter()
    stopped = httpx.post(server.base_url + "/stop_profile", timeout=900)
    stopped.raise_for_status()
    traces = stopped.json()["traces"]
    return {**figures, "write_s": time.perf_counter() - stop_start,
            "trace_mib": sum(os.path.getsize(trace["path"]) for trace in traces) / 2**20,
            "steps_recorded": sum(trace["num_steps"] for trace in traces)}


def medians(rounds: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if rounds[0][key] is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory or .gguf (default: the built-in default model)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--activities", nargs="+", default=["CPU"], choices=["CPU", "CUDA"])
    parser.add_argument("--json-out", help="also write the figures here as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script runs, measures nothing")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.rounds, arguments.num_prompts, arguments.input_len, arguments.output_len = 1, 8, 16, 8
    with tempfile.TemporaryDirectory(prefix="tercet-profiler-overhead-") as work:
        work = Path(work)
        server = start_server(arguments.model, arguments.concurrency, work / "profiles", work / "server.log")
        try:
            one_load(server, arguments, seed=1000)  # warm-up: not measured
            off, recording = [], []
            for index in range(arguments.rounds):
                off.append(one_load(server, arguments, seed=index))
                recording.append(recorded_load(server, arguments, seed=index, round_index=index))
        finally:
            server.stop()
    result = {"config": {key: value for key, value in vars(arguments).items() if key != "json_out"},
              "off": medians(off), "recording": medians(recording), "rounds": {"off": off, "recording": recording}}
    base, profiled = result["off"], result["recording"]
    result["ratios"] = {key: profiled[key] / base[key] for key in base if base[key]}
    print(json.dumps({key: result[key] for key in ("off", "recording", "ratios")}, indent=2))
    if arguments.json_out:
        Path(arguments.json_out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
