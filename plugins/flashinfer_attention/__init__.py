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

from tercet.plugin_api import ConfigError, hookimpl


def flashinfer_unavailable_reason() -> str | None:
    """Why the backend cannot run here, or None when it can."""
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed (pip install 'tercet[flashinfer]')"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device (FlashInfer's kernels run on CUDA only)"
    return None


def create_flashinfer_backend(layout):
    reason = flashinfer_unavailable_reason()
    if reason is None and layout.device.type != "cuda":
        reason = f"the model runs on {layout.device.type}, and FlashInfer's kernels run on CUDA only"
    if reason is not None:
        raise ConfigError(f"attention.backend flashinfer is unavailable: {reason}")
    if layout.deterministic:
        raise ConfigError("attention.backend flashinfer cannot serve model.deterministic = true; "
                          "use paged_cpu (a CPU with a C compiler)")
    from tercet.plugins.flashinfer_attention.backend import FlashInferAttentionBackend

    return FlashInferAttentionBackend(layout)


create_flashinfer_backend.unavailable_reason = flashinfer_unavailable_reason


@hookimpl
def register_attention_backends(register):
    register("flashinfer", create_flashinfer_backend)
