"""``tercet bench`` as a real subprocess against a real tiny server."""

import json
import subprocess
import sys

import pytest

from tercet.testing import free_port

pytestmark = pytest.mark.e2e


def run_bench(*arguments, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "tercet", "bench", *arguments], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_fixed_concurrency_run_completes_every_request(bench_tiny_server, tiny_llama_dir):
    completed = run_bench(
        "--base-url", bench_tiny_server.base_url, "--num-prompts", "8", "--concurrency", "4",
        "--input-len", "32", "--output-len", "16", "--seed", "0", "--json",
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["completed"], result["failed"]) == (8, 0)
    assert result["total_output_tokens"] == 8 * 16
    # The server's own count of the prompts: the synthetic prompts are exactly 32 tokens.
    assert result["total_input_tokens"] == 8 * 32
    for name in ("ttft", "itl", "e2e_latency"):
        assert 0 < result[f"p50_{name}_ms"] <= result[f"p99_{name}_ms"]
        assert result[f"mean_{name}_ms"] > 0
    assert result["p99_ttft_ms"] <= result["p99_e2e_latency_ms"]
    assert result["requests_per_s"] > 0 and result["output_tokens_per_s"] > 0
    assert result["errors"] == []
    # Without --model, the first model the server lists.
    assert result["config"]["model"] == tiny_llama_dir.name
    assert result["config"]["concurrency"] == 4 and result["config"]["request_rate"] is None


def test_poisson_rate_with_a_cap_and_warmup_prints_a_table(bench_tiny_server, tiny_llama_dir):
    completed = run_bench(
        "--base-url", bench_tiny_server.base_url + "/v1", "--num-prompts", "6", "--request-rate", "20",
        "--concurrency", "2", "--input-len", "16", "--output-len", "4", "--warmup", "2",
        "--tokenizer", str(tiny_llama_dir),
    )
    assert completed.returncode == 0, completed.stderr
    assert "Completed / failed:" in completed.stdout and "6 / 0" in completed.stdout
    assert "Poisson arrivals at 20 requests/s, at most 2 in flight" in completed.stdout
    assert "TTFT" in completed.stdout


def test_every_request_failing_exits_non_zero_with_the_reason(bench_tiny_server):
    completed = run_bench(
        "--base-url", bench_tiny_server.base_url, "--model", "no-such-model", "--num-prompts", "3",
        "--concurrency", "3", "--input-len", "8", "--output-len", "2", "--json",
    )
    assert completed.returncode == 1
    result = json.loads(completed.stdout)
    assert (result["completed"], result["failed"]) == (0, 3)
    assert result["errors"][0]["count"] == 3 and "HTTP 404" in result["errors"][0]["error"]
    assert "all 3 requests failed" in completed.stderr and "no-such-model" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_unreachable_server_exits_non_zero_with_a_clear_message():
    base_url = f"http://127.0.0.1:{free_port()}"
    completed = run_bench("--base-url", base_url, "--num-prompts", "2", "--concurrency", "1", "--json", timeout=60)
    assert completed.returncode == 1
    assert f"tercet: error: cannot reach the server at {base_url}" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert completed.stdout == ""


def test_neither_concurrency_nor_rate_is_a_usage_error():
    completed = run_bench("--num-prompts", "2", timeout=60)
    assert completed.returncode == 2
    assert "--concurrency N, --request-rate R, or both" in completed.stderr


def test_no_ignore_eos_leaves_the_extension_out_and_accepts_short_outputs(bench_tiny_server):
    from tercet.bench.serving import _completion_payload, judged
    from tercet.bench.streaming_client import RequestOutcome
    from tercet.bench.workload import BenchRequest

    request = BenchRequest("hello", 2, 16)
    assert _completion_payload("m", request)["ignore_eos"] is True
    assert "ignore_eos" not in _completion_payload("m", request, ignore_eos=False)
    short = RequestOutcome(is_success=True, error="", prompt_len=2, server_prompt_tokens=2, output_tokens=5,
                           ttft=0.1, itl=(0.01,) * 4, latency=0.2)
    assert judged(short, 16, ignore_eos=False) == short
    assert not judged(short, 16).is_success

    completed = run_bench(
        "--base-url", bench_tiny_server.base_url, "--num-prompts", "3", "--concurrency", "3",
        "--input-len", "16", "--output-len", "8", "--no-ignore-eos", "--json",
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["config"]["ignore_eos"] is False
    assert result["completed"] == 3 and 3 <= result["total_output_tokens"] <= 3 * 8


def run_bench_on_a_terminal(*arguments, timeout=120) -> str:
    """``tercet bench`` with its stderr on a pseudo-terminal (stdout a pipe); what the terminal showed."""
    import os
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "tercet", "bench", *arguments], stdout=subprocess.PIPE,
                               stderr=terminal, text=True)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        shown += chunk
    process.communicate(timeout=timeout)
    os.close(controller)
    assert process.returncode == 0, shown
    return shown.decode(errors="replace")


def test_a_terminal_gets_a_live_bar_and_a_pipe_plain_lines(bench_tiny_server):
    arguments = ("--base-url", bench_tiny_server.base_url, "--num-prompts", "12", "--concurrency", "2",
                 "--input-len", "16", "--output-len", "24", "--json")
    shown = run_bench_on_a_terminal(*arguments)
    # Redrawn in place ("\r"), filled up to every request, and left on a line of its own.
    assert "\r[" in shown and f"[{'#' * 30}] 12/12 requests" in shown
    assert shown.rstrip("\r\n").endswith("req/s\x1b[K")
    piped = run_bench(*arguments)
    assert piped.returncode == 0 and "\r" not in piped.stderr and "[#" not in piped.stderr
