"""The built-in attention backend ``flashinfer``: FlashInfer's paged attention kernels, on CUDA only.

FlashInfer is an optional extra (``pip install 'tercet[flashinfer]'``, the
``flashinfer-python`` distribution). Without it, or without a CUDA device,
the backend is still registered, and ``tercet plugins`` lists it as
unavailable with the reason; choosing it then fails at start-up with that
reason. This module is imported in every process, so neither torch nor
flashinfer is imported until the backend is built or its availability asked.
"""

from __future__ import annotations

import importlib.util

from tercet.plugin_api import AttentionBackendFactory, hookimpl


def flashinfer_unavailable_reason() -> str | None:
    """Why the backend cannot run here, or None when it can."""
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed (pip install 'tercet[flashinfer]')"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device (FlashInfer's kernels run on CUDA only)"
    return None


def layout_problem(layout) -> str | None:
    import torch

    if layout.device.type != "cuda":
        return f"the model runs on {layout.device.type}, and FlashInfer's kernels run on CUDA only"
    # The query and cache dtypes FlashInfer builds its attention kernels for (besides fp8 caches).
    if layout.dtype not in (torch.float16, torch.bfloat16):
        return f"FlashInfer's attention kernels take float16 or bfloat16, not {layout.dtype}: set model.dtype"
    if layout.cache_dtype != layout.dtype:
        return (f"its kernels are planned for a cache of the activations' dtype ({layout.dtype}), not "
                f'{layout.cache_dtype}: set cache.kv_dtype = "auto"')
    return None


def build_flashinfer_backend(layout):
    from tercet.plugins.flashinfer_attention.backend import FlashInferAttentionBackend

    return FlashInferAttentionBackend(layout)


create_flashinfer_backend = AttentionBackendFactory(
    "flashinfer", build_flashinfer_backend, environment_problem=flashinfer_unavailable_reason,
    layout_problem=layout_problem, deterministic_refusal="its split of the keys, and so its sums' order, follows the batch; use paged_cpu",
)


@hookimpl
def register_attention_backends(register):
    register("flashinfer", create_flashinfer_backend)
