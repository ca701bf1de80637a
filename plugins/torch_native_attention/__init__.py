"""The built-in attention backend ``torch_native``, registered as any third party would.

This module is imported in every process, so torch is only imported when the
backend is actually built.
"""

from tercet.plugin_api import AttentionBackendFactory, hookimpl


def build_torch_native_backend(layout):
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    return TorchNativeAttentionBackend(layout)


create_torch_native_backend = AttentionBackendFactory(
    "torch_native", build_torch_native_backend,
    deterministic_refusal="its prompt attention is blocked by the batch's padded length; use paged_cpu "
                          "(a CPU with a C compiler)",
)


@hookimpl
def register_attention_backends(register):
    register("torch_native", create_torch_native_backend)
