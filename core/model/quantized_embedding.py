"""An embedding table kept in its GGUF blocks: only the rows a step looks up are widened.

A quantized checkpoint's token embedding is not a linear layer, so no linear
method makes it; the model keeps it as shipped and dequantizes per lookup.
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.formats.gguf_blocks import BlockQuantized


class BlockQuantizedEmbedding(nn.Module):
    """An embedding table kept in its blocks: only the looked-up rows are widened."""

    def __init__(self, block: BlockQuantized, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.block = BlockQuantized(
            block.type_name,
            block.codes.to(device),
            block.scales.to(device),
            None if block.mins is None else block.mins.to(device),
        )
        self.dtype = dtype
        self.num_embeddings, self.embedding_dim = block.shape

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.block.rows(token_ids.reshape(-1)).dequantize().to(self.dtype).view(*token_ids.shape, -1)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.block.type_name}"
