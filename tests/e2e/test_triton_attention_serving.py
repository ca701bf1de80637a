"""The tiny Llama served with attention.backend = "triton" (Triton's interpreter on the CPU)
decodes greedily exactly as with torch_native: prompts sent together, so steps mix
prefill and decode rows and a shared prompt start comes from the prefix cache."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

pytest.importorskip("triton")

PROMPTS = [
    "The quick brown fox",
    "Once upon a time, in a kingdom by the sea, there lived a king who had three daughters.",
    "Once upon a time, in a kingdom by the sea, there lived a queen",
    "1, 2, 3,",
]


def greedy_outputs(server) -> list[list[int]]:
    def generate(prompt):
        body = {"text": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}}
        response = httpx.post(server.base_url + "/generate", json=body, timeout=300)
        response.raise_for_status()
        return response.json()["output_ids"]

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(generate, PROMPTS))


def test_triton_backend_decodes_as_torch_native(start_server, tiny_llama_dir):
    settings = [*TINY_SETTINGS, "model.dtype=float32"]
    reference = start_server(tiny_llama_dir, [*settings, "attention.backend=torch_native"])
    expected = greedy_outputs(reference)
    reference.stop()
    triton_server = start_server(tiny_llama_dir, [*settings, "attention.backend=triton"],
                                 env={"TRITON_INTERPRET": "1"})
    assert greedy_outputs(triton_server) == expected
    assert all(len(output) == 12 for output in expected)
