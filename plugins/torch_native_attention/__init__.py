"""The built-in attention backend ``torch_native``, registered as any third party would.

This module is imported in every process, so torch is only imported when the
backend is actually built.
"""

from tercet.plugin_api import hookimpl


def create_torch_native_backend(layout):
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    return TorchNativeAttentionBackend(layout)


@hookimpl
def register_attention_backends(register):
    register("torch_native", create_torch_native_backend)
