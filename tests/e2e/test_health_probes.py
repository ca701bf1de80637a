"""/health and /health_generate on a real server; server.on_child_failure.

Retry-After on overload is in test_capacity.py, with the 503 it comes with.
"""

import asyncio
import os
import re
import signal
import time

import httpx
import psutil

from tercet.testing import TINY_SETTINGS, RunningServer, num_running, num_waiting, wait_for_ranks


def poll_status(url: str, wanted: int, timeout: float = 30) -> httpx.Response:
    """GET ``url`` until it answers ``wanted``; that response."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = httpx.get(url, timeout=10)
        if response.status_code == wanted:
            return response
        time.sleep(0.1)
    raise TimeoutError(f"{url} never answered {wanted}; last: {response.status_code} {response.text}")


def test_health_generate_on_a_live_server(tiny_server):
    response = httpx.get(tiny_server.base_url + "/health_generate", timeout=60)
    assert response.status_code == 200 and response.json() == {"status": "ok"}

    async def probe_together():
        async with httpx.AsyncClient(base_url=tiny_server.base_url, timeout=60) as client:
            return await asyncio.gather(*[client.get("/health_generate") for _ in range(4)])

    assert [r.status_code for r in asyncio.run(probe_together())] == [200] * 4
    # The probes left nothing behind in the scheduler.
    wait_for_ranks(tiny_server.base_url, lambda ranks: num_running(ranks) == 0 and num_waiting(ranks) == 0)


def test_a_dead_scheduler_leaves_an_unhealthy_server_up(tmp_path, tiny_llama_dir):
    settings = TINY_SETTINGS + ["server.on_child_failure=unhealthy"]
    server = RunningServer(tiny_llama_dir, tmp_path / "server.log", settings).wait_until_healthy()
    try:
        children = [child.pid for child in server.child_processes()]
        scheduler_pid = int(re.search(r"scheduler is ready \(pid (\d+)\)", server.log()).group(1))
        assert scheduler_pid in children
        os.kill(scheduler_pid, signal.SIGKILL)

        health = poll_status(server.base_url + "/health", 503)
        assert health.json()["status"] == "unhealthy"
        assert "scheduler process died (killed by signal SIGKILL)" in health.json()["reason"]
        assert server.process.poll() is None  # still serving

        health_generate = httpx.get(server.base_url + "/health_generate", timeout=30)
        assert health_generate.status_code == 503 and "scheduler" in health_generate.json()["reason"]
        body = {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
        generate = httpx.post(server.base_url + "/generate", json=body, timeout=30)
        assert generate.status_code == 503 and "scheduler process died" in generate.json()["error"]["message"]
        assert server.process.poll() is None
    finally:
        returncode = server.stop()
    assert returncode != 0  # a child died during the run
    assert "scheduler process died (killed by signal SIGKILL)" in server.log()
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in children):
        assert time.monotonic() < deadline, "a child process outlived the server"
        time.sleep(0.1)

