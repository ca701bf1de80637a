"""The built-in attention backend ``triton``: paged attention in Triton kernels, for GPUs.

Triton is an optional extra (``pip install 'tercet[triton]'``). Without it the
backend is still registered, and ``tercet plugins`` lists it as unavailable
with the reason; choosing it then fails at start-up with that reason. On a
CPU tensor Triton runs its kernels only in its interpreter
(``TRITON_INTERPRET=1``, set before the process starts): slow, and meant for
checking the kernels without a GPU, as the tests do. This module is imported
in every process, so neither torch nor triton is imported until the backend
is built.
"""

from __future__ import annotations

import importlib.util
import os

from tercet.plugin_api import AttentionBackendFactory, hookimpl

INTERPRETER_VARIABLE = "TRITON_INTERPRET"
NOT_INSTALLED = "triton is not installed (pip install 'tercet[triton]')"


def triton_unavailable_reason() -> str | None:
    """Why the backend cannot run in this environment, or None when it can."""
    if importlib.util.find_spec("triton") is None:
        return NOT_INSTALLED
    import torch

    if not torch.cuda.is_available() and not interpreter_is_on():
        return "no GPU, and on a CPU Triton runs only in its interpreter (TRITON_INTERPRET=1: slow, for tests)"
    return None


def interpreter_is_on() -> bool:
    return os.environ.get(INTERPRETER_VARIABLE, "0") not in ("", "0")


def layout_problem(layout) -> str | None:
    if layout.device.type == "cpu" and not interpreter_is_on():
        return ("on a CPU Triton runs only in its interpreter: set TRITON_INTERPRET=1 before starting tercet "
                "(slow; it is for checking the kernels), or use paged_cpu on a CPU")
    return None


def build_triton_backend(layout):
    from tercet.plugins.triton_attention.backend import TritonAttentionBackend

    return TritonAttentionBackend(layout)


create_triton_backend = AttentionBackendFactory(
    "triton", build_triton_backend, environment_problem=triton_unavailable_reason, layout_problem=layout_problem,
    deterministic_refusal="a decoding token's kernel depends on whether its step holds prompt tokens; use paged_cpu",
)


@hookimpl
def register_attention_backends(register):
    register("triton", create_triton_backend)
