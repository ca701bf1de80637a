"""The model-side building blocks of the plugin API: these import torch.

A linear method, an attention backend or a model architecture uses them when
it builds layers or runs a step, so a plugin imports this module inside those
functions (plugin modules are imported in every process, and the API process
never imports torch). The interfaces themselves (:class:`LinearMethod`,
:class:`AttentionBackend`, :class:`ModelArchitecture`…) are torch-free and
exported by :mod:`tercet.plugin_api`. Same versioning as there.

- GGUF blocks: :class:`BlockQuantized` (a quantized weight in its blocks),
  :data:`BLOCK_SIZE`, :func:`quantize_blocks`, and :data:`CheckpointWeight`
  (what a linear method is handed: a dense tensor or a :class:`BlockQuantized`);
- a step: :class:`ForwardBatch`, over the :class:`PagedKVCache`;
- loading: :class:`Checkpoint` (tensors one at a time), :class:`LoadReport`,
  :class:`LinearMethodChoice` (which method makes each linear layer);
- the Llama-family decoder, the model every decoder architecture is sized and
  split like: :class:`LlamaForCausalLM`, :class:`LlamaShape`,
  :func:`load_weights` (fused q/k/v and gate/up, each linear layer made by its
  method), and :class:`TensorParallel`, a rank's place in its group.
"""

from __future__ import annotations

from typing import Union

import torch

from tercet.formats.checkpoint import Checkpoint
from tercet.formats.gguf_blocks import BLOCK_SIZE, BlockQuantized, quantize_blocks
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PagedKVCache
from tercet.model.llama import LlamaForCausalLM, LlamaShape
from tercet.model.tensor_parallel import TensorParallel
from tercet.model.weights import LinearMethodChoice, LoadReport, load_weights

# What a linear method's ``create`` receives: a dense tensor, or a GGUF tensor still in its blocks.
CheckpointWeight = Union[torch.Tensor, BlockQuantized]

__all__ = [
    "BLOCK_SIZE",
    "BlockQuantized",
    "Checkpoint",
    "CheckpointWeight",
    "ForwardBatch",
    "LinearMethodChoice",
    "LlamaForCausalLM",
    "LlamaShape",
    "LoadReport",
    "PagedKVCache",
    "TensorParallel",
    "load_weights",
    "quantize_blocks",
]
