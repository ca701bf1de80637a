"""Pooling the final hidden states of a batch of whole sequences into one float32 vector each.

The hidden states are the batch's tokens flattened, ``[T, hidden]``, sequence
after sequence (``seq_lens`` tokens each), as the models compute them: no
padding, so padding can never leak into a mean. The arithmetic is float32
whatever the model's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tercet.formats.pooling_spec import Pooling


def pool_hidden_states(hidden: torch.Tensor, seq_lens: list[int], pooling: Pooling) -> torch.Tensor:
    """``[B, hidden]`` float32: each sequence's ``pooling.method`` over its rows of ``hidden``."""
    hidden = hidden.float()
    lengths = torch.tensor(seq_lens, device=hidden.device)
    starts = torch.cumsum(lengths, 0) - lengths
    if pooling.method == "cls":
        pooled = hidden[starts]
    elif pooling.method == "last":
        pooled = hidden[starts + lengths - 1]
    else:
        sequence_of_row = torch.repeat_interleave(torch.arange(len(seq_lens), device=hidden.device), lengths)
        index = sequence_of_row.unsqueeze(1).expand(-1, hidden.shape[1])
        empty = hidden.new_zeros(len(seq_lens), hidden.shape[1])
        if pooling.method == "mean":
            pooled = empty.scatter_add(0, index, hidden) / lengths.unsqueeze(1).to(hidden.dtype)
        else:  # max
            pooled = empty.scatter_reduce(0, index, hidden, reduce="amax", include_self=False)
    # F.normalize's floor on the norm (1e-12) is sentence-transformers' too.
    return F.normalize(pooled, p=2, dim=1) if pooling.normalize else pooled
