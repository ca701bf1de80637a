"""Several API workers' request metrics, summed at a scrape of any of them.

Each worker is a process of its own here too (multi-process mode is set per process)."""

import subprocess
import sys

OBSERVE = """
import sys
from prometheus_client import generate_latest
from tercet.ipc.messages import FinishKind, FinishReason
from tercet.metrics.serving_metrics import ServingMetrics

directory, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
metrics = ServingMetrics("m", 1, 64, api_worker=worker, shared_dir=directory)
for index in range(count):
    metrics.started(f"r{index}", 0)
    metrics.output(f"r{index}", 2, 3, FinishReason(FinishKind.LENGTH))
print(generate_latest(metrics.registry).decode())
"""


def worker_scrape(directory, worker: int, count: int) -> list[str]:
    """Worker ``worker`` serves ``count`` requests of 3 prompt and 2 generated tokens; its scrape then."""
    done = subprocess.run([sys.executable, "-c", OBSERVE, str(directory), str(worker), str(count)],
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_a_scrape_of_any_worker_sums_every_workers_requests(tmp_path):
    worker_scrape(tmp_path, 1, 2)
    lines = worker_scrape(tmp_path, 2, 3)
    assert 'tercet:request_success_total{dp_rank="0",finished_reason="length",model_name="m"} 5.0' in lines
    assert 'tercet:generation_tokens_total{dp_rank="0",model_name="m"} 10.0' in lines
    assert 'tercet:request_prompt_tokens_count{dp_rank="0",model_name="m"} 5.0' in lines
    # Each worker's own count, whichever worker is scraped.
    assert 'tercet:api_worker_requests_total{api_worker="1",model_name="m"} 2.0' in lines
    assert 'tercet:api_worker_requests_total{api_worker="2",model_name="m"} 3.0' in lines
    # A worker gone (the first one here exited) still counts: a total never goes back.
    assert worker_scrape(tmp_path, 3, 0).count(
        'tercet:request_success_total{dp_rank="0",finished_reason="length",model_name="m"} 5.0') == 1
