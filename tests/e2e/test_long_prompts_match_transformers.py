"""Long prompts on the default model in float32: greedy tokens equal transformers', token for token.

Prompts of 2,048 and 8,000 tokens of real text (this project's own documentation)
go through the model runner over the paged cache, prefilled in chunks (so the
prompt tiles of the attention kernel attend over keys of earlier chunks, across
many splits), then decode. transformers runs the same weights in float32 with
its own attention. In process, not through a server, but slow enough (a minute or
two for the 8,000-token prompt on two cores) to belong to the end-to-end lane.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tercet.testing.paged_greedy import PagedGreedyDriver
from tercet.testing.runner_factory import model_runner_for

NEW_TOKENS = 12
CHUNK_TOKENS = 3000
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _real_text_prompt(tokenizer, num_tokens: int) -> list[int]:
    text = "\n\n".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
    token_ids = tokenizer.encode(text)
    assert len(token_ids) >= num_tokens, "the docs are shorter than the prompt this test needs"
    return token_ids[:num_tokens]


def _transformers_greedy(model_dir, prompt: list[int]) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    input_ids = torch.tensor([prompt])
    with torch.inference_mode():
        generated = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                   max_new_tokens=NEW_TOKENS, pad_token_id=model.config.eos_token_id)
    return generated[0, len(prompt):].tolist()


@pytest.mark.real_model
@pytest.mark.parametrize("prompt_tokens", [2048, 8000])
def test_a_long_prompt_greedy_matches_transformers(default_model_dir, prompt_tokens):
    from transformers import AutoTokenizer

    prompt = _real_text_prompt(AutoTokenizer.from_pretrained(default_model_dir), prompt_tokens)
    runner = model_runner_for(default_model_dir, dtype="float32", device="cpu",
                              max_total_tokens=prompt_tokens + NEW_TOKENS + 32, page_size=16, max_running_requests=2)
    driver = PagedGreedyDriver(runner)
    sequence = driver.start(prompt)
    while len(sequence.output_ids) < NEW_TOKENS:
        driver.step({0: CHUNK_TOKENS}, sequence)
    reference = _transformers_greedy(default_model_dir, prompt)
    assert reference, "transformers generated nothing"
    assert sequence.output_ids[:len(reference)] == reference
