"""The index of each row's largest logit, in two vectorised passes instead of one scalar one.

On CPU ``Tensor.argmax`` over a row reduces element by element: for a batch of
32 rows of a 49k vocabulary it took 2 ms here, while ``amax`` (vectorised)
took 0.15 ms. So the row is cut into blocks; ``amax`` finds each block's
largest value, ``argmax`` picks the first block holding the row's largest
(a few dozen values), and ``argmax`` runs again only inside that block; a
last, partial block is one more candidate of its own. The result is ``argmax``'s exactly: the first index of the largest value, and the
first NaN if the row has one (``amax`` and ``argmax`` both let NaN win).
"""

from __future__ import annotations

import torch

BLOCK = 1024
# Below this many values per row one argmax is as fast as the three steps.
MIN_VOCAB = 4 * BLOCK


def row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(dim=-1)`` for a 2-D ``logits [B, V]``."""
    num_rows, vocab = logits.shape
    if logits.device.type != "cpu" or vocab < MIN_VOCAB or logits.stride(-1) != 1:
        return logits.argmax(dim=-1)
    num_full = vocab // BLOCK
    # A view, no copy: splitting the last dimension keeps the row stride.
    blocks = logits[:, : num_full * BLOCK].view(num_rows, num_full, BLOCK)
    tail = logits[:, num_full * BLOCK :]
    block_max = blocks.amax(dim=-1)
    if tail.shape[-1]:
        block_max = torch.cat((block_max, tail.amax(dim=-1, keepdim=True)), dim=-1)
    # The first block holding the row's largest value holds its first index.
    best_block = block_max.argmax(dim=-1)
    in_full_block = best_block.clamp(max=num_full - 1)
    rows = torch.arange(num_rows, device=logits.device)
    token_ids = in_full_block * BLOCK + blocks[rows, in_full_block].argmax(dim=-1)
    if tail.shape[-1]:
        token_ids = torch.where(best_block == num_full, num_full * BLOCK + tail.argmax(dim=-1), token_ids)
    return token_ids
