"""The contract between the model and an attention backend plugin.

The model computes q, k, v for a whole batch and hands them to the backend once
per layer. The backend owns how keys are found in the paged cache: it builds
whatever per-step metadata it needs in ``prepare`` (called once before layer 0)
so the per-layer ``forward`` does no host work.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from tercet.model.forward_batch import ForwardBatch
    from tercet.model.kv_cache import PagedKVCache


@dataclass(frozen=True)
class AttentionLayout:
    """What a backend needs to know about the model's attention, fixed for its lifetime."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    device: torch.device
    dtype: torch.dtype
    # model.deterministic: every query token's attention must be computed the same way whatever
    # its batch-mates, its prompt's chunking or the prefix cache; a backend that cannot promise
    # it raises ConfigError when it is made.
    deterministic: bool = False
    # The KV cache's dtype ([cache] kv_dtype); None: the activations' ``dtype``. A quantized one
    # (tercet.model.kv_cache.QUANTIZED_KV_DTYPES) is refused at creation by a backend that cannot
    # read it in place.
    kv_dtype: torch.dtype | None = None

    @property
    def scaling(self) -> float:
        return self.head_dim**-0.5

    @property
    def cache_dtype(self) -> torch.dtype:
        return self.kv_dtype if self.kv_dtype is not None else self.dtype


class AttentionBackend(abc.ABC):
    """Causal attention of a batch of sequences over the paged KV cache."""

    # True promises that a decode step can be captured in a CUDA graph and replayed
    # (tercet.model.decode_graphs): ``forward`` launches the same work whatever the
    # batch's values, reads only the batch's tensors and the slot table ``prepare``
    # was given, never a host value of the batch, and holds no host sync.
    supports_cuda_graphs: bool = False

    @abc.abstractmethod
    def prepare(self, batch: ForwardBatch, req_to_token: torch.Tensor) -> None:
        """Build this step's metadata (gather indices, masks) once, before layer 0."""

    @abc.abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        kv_cache: PagedKVCache,
    ) -> torch.Tensor:
        """Write k, v at ``batch.out_cache_loc`` and attend each new token over its own sequence.

        ``q`` is ``[T, num_heads, head_dim]``, ``k`` and ``v`` are
        ``[T, num_kv_heads, head_dim]``; the result is ``[T, num_heads * head_dim]``.
        A new token sees every cached token of its sequence and the new tokens
        up to and including itself. q, k and v may be strided views into one
        projection output: a backend that needs contiguous memory must copy.
        """
