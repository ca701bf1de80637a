"""LoRA adapters on the default model as it is served: GGUF Q4_1 weights on tercet's block kernels, bfloat16."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tercet.testing.lora_adapters import write_peft_adapter

pytestmark = pytest.mark.real_model
PROMPT = "The three primary colours are"


@pytest.fixture(scope="module")
def server(start_server, default_model_dir, tmp_path_factory):
    parent = tmp_path_factory.mktemp("default-adapters")
    small = dict(rank=8)
    adapters = {"every": write_peft_adapter(default_model_dir, parent / "every", seed=1, **small),
                "attention": write_peft_adapter(default_model_dir, parent / "attention", seed=2,
                                                targets=("q_proj", "k_proj", "v_proj", "o_proj"), **small)}
    listed = ",".join(f"{name}={path}" for name, path in adapters.items())
    running = start_server(None, ["scheduler.max_running_requests=8", f"lora.adapters={listed}"])
    yield running
    running.stop()


def generate(server, adapter):
    body = {"text": PROMPT, "lora_name": adapter,
            "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}}
    answer = httpx.post(server.base_url + "/generate", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.json()["output_ids"]


def test_adapters_on_q4_1_layers_change_the_output_and_a_mix_gives_each_what_it_gets_alone(server):
    info = httpx.get(server.base_url + "/get_server_info").json()
    assert info["ranks"][0]["weights"]["layers_by_method"].get("q4_1")
    cases = [None, "every", "attention", None, "every", "attention"]
    alone = [generate(server, adapter) for adapter in cases[:3]]
    assert len({tuple(output) for output in alone}) == 3
    with ThreadPoolExecutor(len(cases)) as pool:
        together = list(pool.map(lambda adapter: generate(server, adapter), cases))
    assert together == alone * 2
