"""The one rule on a prompt's length, applied where a request enters and again in the scheduler."""

from __future__ import annotations


def context_length_problem(num_prompt_tokens: int, max_new_tokens: int, context_len: int) -> str | None:
    """Why a prompt plus its max_tokens cannot fit the model's context (one KV table row), or None."""
    if num_prompt_tokens + max_new_tokens <= context_len:
        return None
    return (
        f"the prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_new_tokens}) exceeds "
        f"the model's context length of {context_len} tokens"
    )
