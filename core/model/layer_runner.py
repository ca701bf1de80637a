"""What runs a Llama decoder's layers in a step: one of three runners, chosen once per model.

A model runner chooses it when it attaches the model to its attention backend
and KV cache (:func:`tercet.model.layer_runner_choice.choose_layer_runner`,
which logs the choice and why), and the model calls it for every step:

- :class:`tercet.model.torch_layers.TorchLayers`: each layer's torch ops, as
  :mod:`tercet.model.llama` writes them. Float32 (whose output must equal
  transformers'), CUDA, ``model.native_kernels = false``.
- :class:`tercet.model.fused_layers.FusedCpuLayers`: layer by layer from Python,
  the norms, SiLU·mul and rotary as C calls (:mod:`tercet.model.fused_ops`).
  Bfloat16 on a CPU.
- :class:`tercet.model.native_layers.NativeLayers`: every layer in one C call,
  where every part of a layer is a C function; a step it does not take (too
  many tokens for a kernel, adapters it cannot add) runs on one of the other two.

A CUDA graph is not a fourth runner: it records a decode step of whichever runs
and replays it (:mod:`tercet.model.decode_graphs`, around the model runner's
forward).
"""

from __future__ import annotations

from typing import Protocol

import torch

from tercet.model.forward_batch import ForwardBatch


class LayerRunner(Protocol):
    def run(self, hidden: torch.Tensor, batch: ForwardBatch, native_lora: bool) -> torch.Tensor:
        """Every decoder layer over ``hidden`` (the step's embeddings, ``[T, hidden]``); the last
        layer's output. ``native_lora``: the LoRA backend adds the deltas a C runner would add
        itself (layers called from Python get theirs through the wrapped projections anyway)."""
