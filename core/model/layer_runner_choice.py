"""Which runner a Llama model's layers run on: chosen once, as its model runner attaches it, and logged.

The most that the model's parts allow (:mod:`tercet.model.layer_runner`
describes the three runners):

1. with ``model.native_kernels`` on, on a CPU, in a dtype the one call is built
   for, when every linear layer and the attention backend offer C functions:
   :class:`NativeLayers`, with the layer-by-layer runner of 2 or 3 for the steps
   it does not take;
2. else, in bfloat16 on a CPU where the fused steps build: :class:`FusedCpuLayers`;
3. else :class:`TorchLayers`.

One INFO line names the runner and why (what kept the faster ones out).
"""

from __future__ import annotations

import logging

import torch

from tercet.model.attention import AttentionBackend
from tercet.model.fused_layers import FusedCpuLayers
from tercet.model.fused_ops import cpu_fused_ops_for, runner_steps_for
from tercet.model.kv_cache import PagedKVCache
from tercet.model.layer_runner import LayerRunner
from tercet.model.llama import LlamaForCausalLM
from tercet.model.native_layers import NativeLayers
from tercet.model.torch_layers import TorchLayers

logger = logging.getLogger(__name__)


def choose_layer_runner(model: LlamaForCausalLM, backend: AttentionBackend, kv_cache: PagedKVCache,
                        native_kernels: bool) -> LayerRunner:
    """The runner of ``model``'s layers over ``backend`` and ``kv_cache`` (``native_kernels``: the
    ``[model]`` setting that allows C code), logged with why it was chosen."""
    runner, why = _chosen(model, backend, kv_cache, native_kernels)
    logger.info("the model's layers run on %s: %s", type(runner).__name__, why)
    return runner


def _chosen(model: LlamaForCausalLM, backend: AttentionBackend, kv_cache: PagedKVCache,
            native_kernels: bool) -> tuple[LayerRunner, str]:
    layer_by_layer, why = _layer_by_layer(model, backend, kv_cache, native_kernels)
    steps = runner_steps_for(model.device, model.dtype, native_kernels)
    if steps is None:
        return layer_by_layer, why
    native = NativeLayers.build(model, backend, kv_cache, steps, layer_by_layer)
    if isinstance(native, str):
        return layer_by_layer, f"{why}; not one call for all layers: {native}"
    return native, (f"every part of a layer is a C function, so a step's layers are one C call; a step it does "
                    f"not take runs on {type(layer_by_layer).__name__} ({why})")


def _layer_by_layer(model: LlamaForCausalLM, backend: AttentionBackend, kv_cache: PagedKVCache,
                    native_kernels: bool) -> tuple[LayerRunner, str]:
    """The runner calling the layers one by one from Python, and why that one."""
    torch_layers = TorchLayers(model.model.layers, model.rotary, backend, kv_cache)
    if not native_kernels:
        return torch_layers, "model.native_kernels = false"
    if model.device.type != "cpu":
        return torch_layers, f"the model runs on {model.device.type}, and the C steps are CPU code"
    if model.dtype != torch.bfloat16:
        return torch_layers, f"{str(model.dtype).removeprefix('torch.')} keeps torch's ops layer by layer"
    fused = cpu_fused_ops_for(model.device, model.dtype, native_kernels)
    if fused is None:
        return torch_layers, "the fused steps do not build here (the warning above says why)"
    fused_layers = FusedCpuLayers(model.model.layers, model.rotary, fused, backend, kv_cache)
    return fused_layers, "in bfloat16 on a CPU, the norms, SiLU·mul and rotary are C calls"
