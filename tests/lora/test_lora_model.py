"""A model runner with LoRA adapters: greedy output equal to PEFT's own, token for token, in mixed batches."""

from __future__ import annotations

import pytest

from tercet.lora.adapter_files import LoraAdapterError
from tercet.plugins.torch_lora_backend import TorchLoraBackend
from tercet.testing.lora_adapters import peft_greedy
from tercet.testing.paged_greedy import PagedGreedyDriver
from tercet.testing.runner_factory import model_runner_for

PROMPTS = [[1, 504, 3458, 282, 4649, 314], [1, 9124, 2492, 253, 655, 28, 281, 253, 1789], [1, 1134, 28171, 30]]
NUM_NEW = 8


@pytest.fixture(scope="module")
def lora_runner(tiny_llama_dir, tiny_adapters):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", device="cpu", max_total_tokens=512, page_size=4,
                              max_running_requests=8)
    lora = runner.attach_lora(TorchLoraBackend(), max_rank=8)
    for name, path in tiny_adapters.items():
        lora.load(name, path)
    return runner


def test_a_batch_of_three_adapters_and_the_base_each_gives_what_peft_gives(lora_runner, tiny_llama_dir,
                                                                             tiny_adapters):
    driver = PagedGreedyDriver(lora_runner)
    names = [None, "every", "attention", "mlp"]
    sequences = [driver.start(PROMPTS[index % len(PROMPTS)], adapter=name) for index, name in enumerate(names)]
    while any(len(sequence.output_ids) < NUM_NEW for sequence in sequences):
        driver.step(None, *sequences)
    for index, (name, sequence) in enumerate(zip(names, sequences)):
        adapter_dir = None if name is None else tiny_adapters[name]
        expected = peft_greedy(tiny_llama_dir, adapter_dir, [PROMPTS[index % len(PROMPTS)]], NUM_NEW)[0]
        assert sequence.output_ids[:len(expected)] == expected, name


def test_each_adapter_changes_the_output(lora_runner):
    outputs = []
    for name in (None, "every", "attention", "mlp"):
        driver = PagedGreedyDriver(lora_runner)
        sequence = driver.start(PROMPTS[0], adapter=name)
        while len(sequence.output_ids) < NUM_NEW:
            driver.step(None, sequence)
        outputs.append(tuple(sequence.output_ids))
    assert len(set(outputs)) == 4


def test_a_name_loaded_twice_is_refused_and_the_first_stays(lora_runner, tiny_adapters):
    loaded = lora_runner.lora.adapters["every"]
    with pytest.raises(LoraAdapterError, match="already loaded"):
        lora_runner.lora.load("every", tiny_adapters["mlp"])
    assert lora_runner.lora.adapters["every"] is loaded


@pytest.mark.real_model
def test_the_default_model_in_float32_with_an_adapter_gives_what_peft_gives(default_model_dir, tmp_path):
    from tercet.testing.lora_adapters import write_peft_adapter

    adapter_dir = write_peft_adapter(default_model_dir, tmp_path / "adapter", rank=8, seed=5)
    runner = model_runner_for(default_model_dir, dtype="float32", device="cpu", quantization="none",
                              max_total_tokens=256, page_size=16, max_running_requests=2)
    runner.attach_lora(TorchLoraBackend(), max_rank=8).load("adapter", str(adapter_dir))
    driver = PagedGreedyDriver(runner)
    prompt = [1, 504, 3458, 282, 4649, 314, 1178, 30]
    with_adapter, base = driver.start(prompt, adapter="adapter"), driver.start(prompt)
    while len(with_adapter.output_ids) < NUM_NEW:
        driver.step(None, with_adapter, base)
    expected = peft_greedy(default_model_dir, adapter_dir, [prompt], NUM_NEW)[0]
    assert with_adapter.output_ids[:len(expected)] == expected
    assert with_adapter.output_ids != base.output_ids

