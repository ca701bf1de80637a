"""Every position's next-token log-probabilities over whole prompts, in one prefill step of a model runner.

For comparing two ways of running a model on real text (a quantized KV cache against a bfloat16 one,
say): each prompt gets pages of its own, and the step returns the logits of all its positions.
"""

from __future__ import annotations

import torch


def teacher_forced_logprobs(runner, prompts: list[list[int]]) -> torch.Tensor:
    """``[positions, vocab]`` float32 log-probabilities of every position of every prompt (one after the other),
    all prompts prefilled together in one step on ``runner`` (a :class:`tercet.model.model_runner.ModelRunner`
    whose pool and request rows hold them)."""
    page_size = runner.page_size
    rows = []
    for prompt in prompts:
        row = runner.req_to_token_pool.alloc()
        pages = runner.page_allocator.alloc(-(-len(prompt) // page_size))
        runner.req_to_token_pool.assign_pages(row, 0, pages, page_size)
        rows.append(row)
    batch = runner.build_batch(rows, [0] * len(prompts), prompts)
    _, logits = runner.forward_with_prompt_logits(batch, list(range(len(prompts))))
    return torch.log_softmax(torch.cat([logits[index].float() for index in range(len(prompts))]), dim=-1)
