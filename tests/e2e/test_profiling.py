"""``server.profile_interval`` logs where each process's time goes."""

import re
import time

import httpx
from running_server import TINY_SETTINGS


def test_each_process_logs_its_stage_times(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + ["server.profile_interval=0.2"])
    body = {"text": "Count", "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}
    deadline = time.monotonic() + 60
    while not all(f"{name} profile:" in server.log() for name in ("scheduler-0", "detokenizer", "tokenizer")):
        assert time.monotonic() < deadline, server.log()
        assert httpx.post(server.base_url + "/generate", json=body, timeout=60).status_code == 200
    log = server.log()
    scheduler_line = re.search(r"scheduler-0 profile: (\d+) steps.*", log).group(0)
    for stage in ("receive", "schedule", "forward", "sample", "output"):
        assert re.search(rf"{stage} \d+\.\d+ ms \(\d+%\)", scheduler_line), scheduler_line
    detokenizer_line = re.search(r"detokenizer profile: .*", log).group(0)
    for stage in ("receive", "detokenize", "send"):
        assert f"{stage} " in detokenizer_line, detokenizer_line
    assert re.search(r"tokenizer profile: .*dispatch \d+\.\d+ ms", log)
