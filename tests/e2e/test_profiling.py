"""``server.profile_interval`` logs where each process's time goes."""

import re
import time

import httpx

from tercet.testing import TINY_SETTINGS


def profile_line(name: str, log: str) -> str | None:
    """The first profile line of process ``name`` ("tokenizer" must not match "detokenizer")."""
    match = re.search(rf"(?<![\w-]){re.escape(name)} profile: .*", log)
    return match.group(0) if match else None


def test_each_process_logs_its_stage_times(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + ["server.profile_interval=0.2"])
    body = {"text": "Count", "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}
    deadline = time.monotonic() + 60
    while not all(profile_line(name, server.log()) for name in ("scheduler-0", "detokenizer", "tokenizer")):
        assert time.monotonic() < deadline, server.log()
        assert httpx.post(server.base_url + "/generate", json=body, timeout=60).status_code == 200
    log = server.log()
    scheduler_line = profile_line("scheduler-0", log)
    for stage in ("receive", "schedule", "forward", "sample", "output"):
        assert re.search(rf"{stage} \d+\.\d+ ms \(\d+%\)", scheduler_line), scheduler_line
    detokenizer_line = profile_line("detokenizer", log)
    for stage in ("receive", "detokenize", "send"):
        assert f"{stage} " in detokenizer_line, detokenizer_line
    tokenizer_line = profile_line("tokenizer", log)
    assert re.search(r"dispatch \d+\.\d+ ms", tokenizer_line), tokenizer_line
