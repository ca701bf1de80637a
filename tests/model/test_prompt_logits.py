"""Prompt log-probabilities from the lean model equal transformers' forward, in float32."""

from __future__ import annotations

import pytest
import torch

from tercet.ipc.messages import TokenLogprobs
from tercet.model.logprobs import prompt_logprobs, prompt_logprobs_of_chunk
from tercet.model.model_runner import ModelRunner
from tercet.testing.runner_factory import model_runner_for

PAGE_SIZE = 4
TOP_N = 5
TOLERANCE = 1e-3


def _runner(model_dir, max_total_tokens: int = 512) -> ModelRunner:
    return model_runner_for(
        model_dir, dtype="float32", device="cpu", max_total_tokens=max_total_tokens, page_size=PAGE_SIZE,
        max_running_requests=4,
    )


def _place(runner: ModelRunner, num_tokens: int) -> int:
    """A slot-table row with pages for ``num_tokens`` positions."""
    row = runner.req_to_token_pool.alloc()
    pages = runner.page_allocator.alloc(-(-num_tokens // PAGE_SIZE))
    runner.req_to_token_pool.assign_pages(row, 0, pages, PAGE_SIZE)
    return row


def _reference_logprobs(model_dir, prompt: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def _assert_matches_reference(result: TokenLogprobs, prompt: list[int], reference: torch.Tensor) -> None:
    assert result.token_ids == prompt
    assert result.logprobs[0] is None and result.top[0] == []
    expected = reference[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
    torch.testing.assert_close(torch.tensor(result.logprobs[1:]), expected, atol=TOLERANCE, rtol=0)
    for j in range(1, len(prompt)):
        best = reference[j - 1].topk(TOP_N)
        ours = torch.tensor([value for _, value in result.top[j]])
        torch.testing.assert_close(ours, best.values, atol=TOLERANCE, rtol=0)
        # Near-ties may swap places; each reported id must carry its reference logprob.
        for token_id, value in result.top[j]:
            assert abs(reference[j - 1, token_id].item() - value) < TOLERANCE


@pytest.fixture(scope="module")
def prompts(tiny_llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    texts = ["The quick brown fox jumps over the lazy dog.", "Paged attention keeps keys in blocks", "Hi"]
    return [tokenizer(text)["input_ids"] for text in texts]


def test_prompt_logprobs_match_transformers_in_a_mixed_batch(tiny_llama_dir, prompts):
    runner = _runner(tiny_llama_dir)
    listed, unlisted, decoding = prompts
    rows = [_place(runner, len(p) + 1) for p in prompts]
    # The decoding sequence's prompt is cached first, so the step mixes one decode with two prefills.
    runner.forward(runner.build_batch([rows[2]], [0], [decoding]))
    batch = runner.build_batch(rows, [0, 0, len(decoding)], [listed, unlisted, [17]])

    lm_head_rows = []
    hook = runner.model.lm_head.register_forward_hook(lambda _m, args, _out: lm_head_rows.append(args[0].shape[0]))
    try:
        last_logits, full_logits = runner.forward_with_prompt_logits(batch, [0])
    finally:
        hook.remove()
    assert lm_head_rows == [3 + len(listed)]  # the batch's last tokens and the listed prompt, nothing else
    assert list(full_logits) == [0] and full_logits[0].shape == (len(listed), runner.vocab_size)
    assert last_logits.dtype == torch.float32 and full_logits[0].dtype == torch.float32
    torch.testing.assert_close(last_logits, runner.forward(batch))
    torch.testing.assert_close(last_logits[0], full_logits[0][-1])

    result = prompt_logprobs(full_logits[0], listed, TOP_N)
    _assert_matches_reference(result, listed, _reference_logprobs(tiny_llama_dir, listed))


def test_prompt_logprobs_of_chunked_prefill_match_transformers(tiny_llama_dir, prompts):
    runner = _runner(tiny_llama_dir)
    prompt = prompts[0] + prompts[1]
    row = _place(runner, len(prompt))
    parts = []
    for start, end in [(0, 5), (5, 6), (6, len(prompt))]:
        batch = runner.build_batch([row], [start], [prompt[start:end]])
        _, full_logits = runner.forward_with_prompt_logits(batch, [0])
        parts.append(prompt_logprobs_of_chunk(full_logits[0], prompt, start, TOP_N))
    _assert_matches_reference(TokenLogprobs.concat(parts), prompt, _reference_logprobs(tiny_llama_dir, prompt))


def test_no_listed_sequence_gives_the_plain_forward(tiny_llama_dir, prompts):
    runner = _runner(tiny_llama_dir)
    rows = [_place(runner, len(p)) for p in prompts[:2]]
    batch = runner.build_batch(rows, [0, 0], prompts[:2])
    last_logits, full_logits = runner.forward_with_prompt_logits(batch, [])
    assert full_logits == {}
    torch.testing.assert_close(last_logits, runner.forward(batch))


@pytest.mark.real_model
def test_default_model_prompt_logprobs_match_transformers(default_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    runner = _runner(default_model_dir, max_total_tokens=256)
    row = _place(runner, len(prompt))
    _, full_logits = runner.forward_with_prompt_logits(runner.build_batch([row], [0], [prompt]), [0])
    result = prompt_logprobs(full_logits[0], prompt, TOP_N)
    _assert_matches_reference(result, prompt, _reference_logprobs(default_model_dir, prompt))
