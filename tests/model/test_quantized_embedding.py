"""A quantized token embedding kept in its blocks."""

from __future__ import annotations

import torch

from tercet.formats.gguf_blocks import quantize_blocks
from tercet.model.quantized_embedding import BlockQuantizedEmbedding

CPU = torch.device("cpu")


def test_a_block_quantized_embedding_widens_only_the_rows_looked_up():
    torch.manual_seed(0)
    weight = torch.randn(96, 128) * 0.05
    block = quantize_blocks(weight, "Q8_0")
    embedding = BlockQuantizedEmbedding(block, torch.float32, CPU)
    token_ids = torch.tensor([[3, 0], [95, 3]])
    out = embedding(token_ids)
    assert out.shape == (2, 2, 128)
    torch.testing.assert_close(out, block.dequantize()[token_ids])
