"""The built-in attention backend ``torch_native``, registered as any third party would.

This module is imported in every process, so torch is only imported when the
backend is actually built.
"""

from tercet.plugin_api import ConfigError, hookimpl


def create_torch_native_backend(layout):
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    if layout.deterministic:
        raise ConfigError(
            "attention.backend torch_native cannot serve model.deterministic = true: its prompt attention "
            "is blocked by the batch's padded length; use paged_cpu (a CPU with a C compiler)"
        )
    return TorchNativeAttentionBackend(layout)


@hookimpl
def register_attention_backends(register):
    register("torch_native", create_torch_native_backend)
