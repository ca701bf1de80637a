"""The matrix multiplications of one decode step, run alone: how much of the step they are.

A decode step multiplies each sequence's new token by every projection weight
of the model once: per layer the fused q/k/v, the output projection, the fused
gate/up and the down projection, then the LM head. Running exactly those
calls (the loaded model's own layers, packed weights included, in forward
order) on random activations of the step's batch size, with nothing in
between, times what the multiplications cost by themselves on this machine.
A decode step's time minus this is everything else: norms, rotary, attention,
sampling, scheduling and the Python that strings them together. The number of
weight bytes one pass reads says what memory bandwidth the figure implies.
"""

from __future__ import annotations

import statistics
import time


def linear_layers_in_forward_order(model) -> list:
    """Every linear layer (``nn.Linear`` or a packed one) of ``model``, in the order a forward calls them.

    Modules are registered in the order the Llama forward uses them (q/k/v
    before o, gate/up before down, the layers before the LM head)."""
    return [module for module in model.modules() if hasattr(module, "in_features") and hasattr(module, "out_features")]


def weight_bytes_per_pass(layers, dtype) -> int:
    import torch

    element_size = torch.empty((), dtype=dtype).element_size()
    return sum(layer.in_features * layer.out_features for layer in layers) * element_size


def time_matmuls(model, batch_size: int, repeats: int = 5) -> dict:
    """Median wall time of one pass over every linear layer at ``batch_size`` rows, with what it reads."""
    import torch

    if batch_size < 1 or repeats < 1:
        raise ValueError("batch_size and repeats must be at least 1")
    layers = linear_layers_in_forward_order(model)
    dtype, device = model.dtype, model.device
    generator = torch.Generator(device="cpu").manual_seed(0)
    inputs = {
        width: torch.randn(batch_size, width, generator=generator).to(device=device, dtype=dtype)
        for width in {layer.in_features for layer in layers}
    }

    def one_pass() -> float:
        started = time.perf_counter()
        for layer in layers:
            layer(inputs[layer.in_features])
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    with torch.inference_mode():
        one_pass()  # warm-up: first-call setup of the kernels
        times = [one_pass() for _ in range(repeats)]
    return {
        "matmul_ms": 1000 * statistics.median(times),
        "num_matmuls": len(layers),
        "weight_bytes": weight_bytes_per_pass(layers, dtype),
        "batch_size": batch_size,
    }
