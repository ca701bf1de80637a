"""Apply constrained rows' token bitmasks to a step's logits, all rows at once.

Backends write int32 words (bit ``t % 32`` of word ``t // 32`` allows token
``t``); the words are unpacked into a boolean mask with one shift over the
``[rows, words, 32]`` grid, and disallowed logits become -inf. Only the
constrained rows are touched: rows without a constraint pay nothing.
"""

from __future__ import annotations

import torch

BITS = 32


def bitmask_words(vocab_size: int) -> int:
    return (vocab_size + BITS - 1) // BITS


def new_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    return torch.zeros((num_rows, bitmask_words(vocab_size)), dtype=torch.int32)


def allowed_tokens(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Boolean ``[rows, vocab_size]``: True where the bitmask allows the token."""
    shifts = torch.arange(BITS, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.view(bitmask.shape[0], -1)[:, :vocab_size].bool()


def mask_rows(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """``logits`` with each of ``rows`` masked by its bitmask row (in order); a new tensor."""
    masked = logits.clone()
    index = torch.tensor(rows, device=logits.device)
    allowed = allowed_tokens(bitmask.to(logits.device), logits.shape[1])
    masked[index] = logits[index].masked_fill(~allowed, float("-inf"))
    return masked
