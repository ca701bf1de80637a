"""A lean BERT encoder: the final hidden states of whole sequences, no KV cache.

Embeddings (word + position + token type 0, then LayerNorm), then layers of
bidirectional self-attention and a GELU feed-forward, each followed by its
residual sum and LayerNorm (post-LN), as in the original BERT. Like the Llama
model, every layer sees the batch's tokens flattened to ``[T, hidden]``;
attention alone scatters them into a ``[B, S]`` grid whose padding keys are
masked out, so a sequence's result never depends on what it was batched with.
q, k and v are one fused projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tercet.plugin_api import ConfigError

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass(frozen=True)
class BertShape:
    """The sizes a BERT config fixes."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str

    @classmethod
    def from_config(cls, config) -> BertShape:
        position_type = getattr(config, "position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ConfigError(f"BERT with position_embedding_type {position_type!r} is not supported (only absolute)")
        hidden_act = getattr(config, "hidden_act", "gelu")
        if hidden_act not in ACTIVATIONS:
            raise ConfigError(f"BERT hidden_act {hidden_act!r} is not supported; supported: {', '.join(ACTIVATIONS)}")
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            layer_norm_eps=config.layer_norm_eps,
            hidden_act=hidden_act,
        )


@dataclass(frozen=True)
class SequenceGrid:
    """Where a batch's flattened tokens sit in the padded ``[B, S]`` grid attention runs on."""

    batch_size: int
    max_len: int
    padded_index: torch.Tensor | None  # [T] into the flattened grid; None when B == 1 (no padding)
    key_mask: torch.Tensor | None  # [B, 1, 1, S], True for a real key

    @classmethod
    def of(cls, seq_lens: list[int], device) -> SequenceGrid:
        batch_size, max_len = len(seq_lens), max(seq_lens)
        if batch_size == 1:
            return cls(1, max_len, None, None)
        lengths = torch.tensor(seq_lens, device=device)
        sequence_of_token = torch.repeat_interleave(torch.arange(batch_size, device=device), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        offset = torch.arange(int(lengths.sum()), device=device) - starts[sequence_of_token]
        key_mask = torch.arange(max_len, device=device).view(1, max_len) < lengths.view(-1, 1)
        return cls(batch_size, max_len, sequence_of_token * max_len + offset, key_mask.view(batch_size, 1, 1, max_len))

    def to_grid(self, rows: torch.Tensor) -> torch.Tensor:
        """``[T, ...]`` -> ``[B, S, ...]``, zeros in the padding."""
        if self.padded_index is None:
            return rows.unsqueeze(0)
        grid = rows.new_zeros(self.batch_size * self.max_len, *rows.shape[1:])
        grid.index_copy_(0, self.padded_index, rows)
        return grid.view(self.batch_size, self.max_len, *rows.shape[1:])

    def from_grid(self, grid: torch.Tensor) -> torch.Tensor:
        """``[B, S, ...]`` -> ``[T, ...]``, the padding dropped."""
        if self.padded_index is None:
            return grid.squeeze(0)
        return grid.reshape(self.batch_size * self.max_len, *grid.shape[2:]).index_select(0, self.padded_index)


class BertLayer(nn.Module):
    def __init__(self, shape: BertShape):
        super().__init__()
        self.num_heads = shape.num_heads
        self.head_dim = shape.hidden_size // shape.num_heads
        self.qkv_proj = nn.Linear(shape.hidden_size, 3 * shape.hidden_size)
        self.attention_output = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.attention_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.intermediate = nn.Linear(shape.hidden_size, shape.intermediate_size)
        self.output = nn.Linear(shape.intermediate_size, shape.hidden_size)
        self.output_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.activation = ACTIVATIONS[shape.hidden_act]

    def forward(self, hidden: torch.Tensor, grid: SequenceGrid) -> torch.Tensor:
        qkv = grid.to_grid(self.qkv_proj(hidden).view(-1, 3, self.num_heads, self.head_dim))
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, S, head_dim]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=grid.key_mask)
        attended = grid.from_grid(attended.transpose(1, 2)).reshape(hidden.shape)
        hidden = self.attention_norm(hidden + self.attention_output(attended))
        return self.output_norm(hidden + self.output(self.activation(self.intermediate(hidden))))


class BertEncoder(nn.Module):
    """``forward(input_ids, seq_lens)``: the final hidden states ``[T, hidden]`` of every token of
    every sequence (``input_ids`` flattened, ``seq_lens`` tokens each), each sequence attending to
    all of itself and nothing else. Token type ids are all 0: one text per sequence."""

    def __init__(self, config, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.shape = BertShape.from_config(config)
        self.dtype = dtype
        self.device = torch.device(device)
        shape = self.shape
        # Built on the meta device: the checkpoint overwrites every weight, so none is initialised.
        with torch.device("meta"):
            self.word_embeddings = nn.Embedding(shape.vocab_size, shape.hidden_size)
            self.position_embeddings = nn.Embedding(shape.max_position_embeddings, shape.hidden_size)
            self.token_type_embeddings = nn.Embedding(shape.type_vocab_size, shape.hidden_size)
            self.embedding_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
            self.layers = nn.ModuleList(BertLayer(shape) for _ in range(shape.num_layers))
        self.to_empty(device=self.device).to(dtype)

    @property
    def hidden_size(self) -> int:
        return self.shape.hidden_size

    @property
    def max_positions(self) -> int:
        return self.shape.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        grid = SequenceGrid.of(seq_lens, input_ids.device)
        positions = torch.cat([torch.arange(length, device=input_ids.device) for length in seq_lens])
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        hidden = self.embedding_norm(hidden)
        for layer in self.layers:
            hidden = layer(hidden, grid)
        return hidden
