"""The tcp transport and the pickle serializer each serve an end-to-end request."""

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

BODY = {"text": "The weather today is", "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}}


@pytest.mark.parametrize(
    "settings, log_mentions",
    [
        (["ipc.transport=tcp"], "tcp://127.0.0.1:"),
        (["ipc.serializer=pickle"], "trusted"),
    ],
    ids=["tcp-transport", "pickle-serializer"],
)
def test_alternative_ipc_serves_the_same_output(start_server, tiny_server, tiny_llama_dir, settings, log_mentions):
    reference = httpx.post(tiny_server.base_url + "/generate", json=BODY, timeout=60).json()
    server = start_server(tiny_llama_dir, TINY_SETTINGS + settings + ["server.log_level=debug"])
    try:
        answer = httpx.post(server.base_url + "/generate", json=BODY, timeout=60).json()
        assert answer["output_ids"] == reference["output_ids"]
        assert answer["text"] == reference["text"]
        assert log_mentions in server.log()
    finally:
        assert server.stop() == 0
