"""Tensor parallelism: which part of each weight a rank holds, and the collectives that join them.

The Llama layers split the way Megatron-LM introduced and SGLang and vLLM
follow, on torch.distributed (gloo on CPU, NCCL on CUDA):

- column-parallel: the fused q/k/v projection by attention heads (each rank
  computes its own heads, with the KV heads they read, which ranks may
  share) and the fused gate/up projection by intermediate rows;
- row-parallel: the o and down projections take their rank's slice of the
  input features, and their outputs are summed over the ranks (all-reduce);
- vocab-parallel: the embedding and the LM head hold a slice of the
  vocabulary each (padded to equal slices); the embedding sums its lookups
  over the ranks, the head's logits are gathered before sampling.

Every rank holds only its shard of the weights and of the KV pool (its own
KV heads). :data:`SINGLE` is the one-process case: no collective runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tercet.errors import ConfigError
from tercet.formats.gguf_blocks import BLOCK_SIZE, BlockQuantized


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1
    # The torch.distributed process group of this rank's TP peers (None: the default group).
    group: object = None

    @property
    def enabled(self) -> bool:
        return self.size > 1

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum of ``tensor`` over the ranks, in place."""
        if self.enabled:
            import torch.distributed as dist

            dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather_columns(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``[rows, columns]`` side by side: ``[rows, size * columns]``, in rank order."""
        if not self.enabled:
            return tensor
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(parts, tensor.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


SINGLE = TensorParallel()


@dataclass(frozen=True)
class LlamaShards:
    """One rank's share of a Llama model's sizes.

    Heads and intermediate rows are split as evenly as they go (9 heads on 2
    ranks: 4 and 5). A rank holds the KV heads its query heads read; when
    those do not group evenly (4 query heads reading 3, 3, 1, say) it holds a
    copy per query head instead, so its attention is plain multi-head and
    needs nothing special from the backend, at the cost of a larger KV slice.
    """

    tp: TensorParallel
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int

    @classmethod
    def of(cls, shape, tp: TensorParallel) -> "LlamaShards":
        """``shape`` is a :class:`tercet.model.llama.LlamaShape`; a model that cannot split is a ConfigError."""
        if tp.size > shape.num_heads:
            raise ConfigError(f"tp_size {tp.size} is more than the model's {shape.num_heads} attention heads")
        if not 0 <= tp.rank < tp.size:
            raise ConfigError(f"tensor-parallel rank {tp.rank} is outside tp_size {tp.size}")
        return cls(tp, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.intermediate_size, shape.vocab_size)

    def _span(self, total: int, rank: int | None = None) -> tuple[int, int]:
        rank = self.tp.rank if rank is None else rank
        return rank * total // self.tp.size, (rank + 1) * total // self.tp.size

    @property
    def head_span(self) -> tuple[int, int]:
        return self._span(self.num_heads)

    @property
    def local_heads(self) -> int:
        start, end = self.head_span
        return end - start

    def kv_heads_of(self, rank: int | None = None) -> list[int]:
        """The KV heads rank ``rank`` holds, in order (one may repeat; see the class)."""
        start, end = self._span(self.num_heads, rank)
        group = self.num_heads // self.num_kv_heads
        read = [head // group for head in range(start, end)]
        distinct = sorted(set(read))
        if all(read.count(kv_head) == read.count(distinct[0]) for kv_head in distinct):
            return distinct
        return read

    @property
    def local_kv_heads(self) -> int:
        return len(self.kv_heads_of())

    @property
    def most_kv_heads(self) -> int:
        """The most KV heads any rank holds: every rank sizes its pool by it, so all have as many pages."""
        return max(len(self.kv_heads_of(rank)) for rank in range(self.tp.size))

    @property
    def intermediate_span(self) -> tuple[int, int]:
        return self._span(self.intermediate_size)

    @property
    def local_intermediate(self) -> int:
        start, end = self.intermediate_span
        return end - start

    @property
    def local_vocab(self) -> int:
        """Rows of the vocabulary each rank holds (the last rank's slice padded): equal, for the gather."""
        return math.ceil(self.vocab_size / self.tp.size)

    @property
    def vocab_start(self) -> int:
        return self.tp.rank * self.local_vocab

    # -- slicing checkpoint tensors -------------------------------------------------

    def part(self, module: str, part: str | None, tensor, kind: str = "weight"):
        """This rank's slice of one checkpoint tensor of linear layer ``module`` (``part``: q, k, v, gate, up)."""
        if not self.tp.enabled:
            return tensor
        leaf = module.rpartition(".")[2]
        if leaf == "qkv_proj":
            return self._attention_rows(part, tensor)
        if leaf == "gate_up_proj":
            start, end = self.intermediate_span
            return _rows(tensor, start, end - start)
        if leaf in ("o_proj", "down_proj"):
            return self._row_parallel_part(module, leaf, tensor, kind)
        if leaf == "lm_head":
            return self.vocab_rows(tensor)
        raise ConfigError(f"no tensor-parallel split is known for layer {module!r}")

    def _attention_rows(self, part: str | None, tensor):
        """The rows of this rank's query heads (``part`` q), or of the KV heads they read (k, v)."""
        head_dim = self.head_dim
        if part == "q":
            start, end = self.head_span
            return _rows(tensor, start * head_dim, (end - start) * head_dim)
        return _cat_rows([_rows(tensor, kv_head * head_dim, head_dim) for kv_head in self.kv_heads_of()])

    def _row_parallel_part(self, module: str, leaf: str, tensor, kind: str):
        """An output projection's input columns of this rank; its bias on rank 0 alone."""
        if kind == "bias":
            # Summed over the ranks after the matmul: only rank 0 adds it.
            return tensor if self.tp.rank == 0 else torch.zeros_like(_dense(tensor))
        start, end = self.head_span if leaf == "o_proj" else self.intermediate_span
        scale = self.head_dim if leaf == "o_proj" else 1
        return _columns(tensor, start * scale, (end - start) * scale, module)

    def vocab_rows(self, tensor):
        """This rank's vocabulary rows of the embedding or LM head, zero-padded to ``local_vocab``."""
        if not self.tp.enabled:
            return tensor
        rows = _rows(tensor, self.vocab_start, max(0, min(self.local_vocab, self.vocab_size - self.vocab_start)))
        missing = self.local_vocab - _rows_of(rows)
        return _pad_rows(rows, missing) if missing > 0 else rows


def _rows_of(tensor) -> int:
    return tensor.shape[0]


def _dense(tensor) -> torch.Tensor:
    return tensor.dequantize() if isinstance(tensor, BlockQuantized) else tensor


# Slices are copied: a view would keep the whole checkpoint tensor alive.


def _rows(tensor, start: int, count: int):
    if isinstance(tensor, BlockQuantized):
        end = start + count
        mins = None if tensor.mins is None else tensor.mins[start:end].clone()
        return BlockQuantized(tensor.type_name, tensor.codes[start:end].clone(), tensor.scales[start:end].clone(), mins)
    return tensor[start:start + count].clone()


def _cat_rows(parts: list):
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], BlockQuantized):
        return BlockQuantized.concat(parts)
    return torch.cat(parts)


def _columns(tensor, start: int, count: int, module: str):
    if isinstance(tensor, BlockQuantized):
        if start % BLOCK_SIZE or count % BLOCK_SIZE:
            raise ConfigError(
                f"{module} is {tensor.type_name}-quantized in blocks of {BLOCK_SIZE} input features, and its "
                f"tensor-parallel slice of {count} features does not fall on block boundaries; "
                "serve it with a smaller tp_size or model.quantization = \"none\""
            )
        first, blocks = start // BLOCK_SIZE, count // BLOCK_SIZE
        mins = None if tensor.mins is None else tensor.mins[:, first:first + blocks].contiguous()
        return BlockQuantized(
            tensor.type_name, tensor.codes[:, start:start + count].contiguous(),
            tensor.scales[:, first:first + blocks].contiguous(), mins,
        )
    return tensor[:, start:start + count].contiguous()


def _pad_rows(tensor, missing: int):
    if isinstance(tensor, BlockQuantized):
        # Zero scales (and minimums) make the padding rows exact zeros.
        def padded(part):
            return torch.cat([part, part.new_zeros((missing, part.shape[1]))])

        mins = None if tensor.mins is None else padded(tensor.mins)
        return BlockQuantized(tensor.type_name, padded(tensor.codes), padded(tensor.scales), mins)
    return torch.cat([tensor, tensor.new_zeros((missing, tensor.shape[1]))])
