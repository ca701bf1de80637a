"""The built-in attention backend ``paged_cpu``: decode attention read in place from the paged cache.

Every step runs a small C kernel, built once per machine into tercet's cache
(at the instruction-set level in use) and loaded with ctypes (see :mod:`.backend`).
It reads a float32, bfloat16, int8 or e4m3 cache in place (``cache.kv_dtype``; the
quantized ones with their row scales). Where the kernel cannot be used (not a CPU,
activations in a dtype it does not take, no C compiler) the backend is
``torch_native``, and the log says why once; not where ``model.deterministic`` or a
quantized cache needs the kernel: that is a ConfigError naming the setting. This
module is imported in every process, so torch is only imported when the backend is built.
"""

import logging

from tercet.plugin_api import ConfigError, hookimpl

logger = logging.getLogger(__name__)


def create_paged_cpu_backend(layout):
    from tercet.plugins.paged_cpu_attention.backend import ACTIVATION_DTYPES, PagedCpuAttentionBackend
    from tercet.plugins.paged_cpu_attention.build import KernelUnavailable, load_kernel
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    needs_kernel = _setting_that_needs_the_kernel(layout)
    if layout.device.type != "cpu" or layout.dtype not in ACTIVATION_DTYPES:
        if needs_kernel:
            raise ConfigError(f"{needs_kernel} needs the paged_cpu kernel, which runs on a CPU in "
                              f"float32 or bfloat16, not on {layout.device.type} in {layout.dtype}")
        return TorchNativeAttentionBackend(layout)
    try:
        kernel = load_kernel(layout)
    except KernelUnavailable as error:
        if needs_kernel:
            raise ConfigError(f"{needs_kernel} needs the paged_cpu kernel: {error}") from None
        logger.warning("attention.backend paged_cpu runs as torch_native: %s", error)
        return TorchNativeAttentionBackend(layout)
    return PagedCpuAttentionBackend(layout, kernel)


def _setting_that_needs_the_kernel(layout) -> str | None:
    """The setting that rules out running as torch_native (which has no batch-invariant promise, and reads
    no quantized cache), or None."""
    from tercet.plugins.paged_cpu_attention.backend import ACTIVATION_DTYPES

    if layout.deterministic:
        return "model.deterministic = true"
    if layout.cache_dtype not in ACTIVATION_DTYPES:
        return f"cache.kv_dtype ({str(layout.cache_dtype).removeprefix('torch.')})"
    return None


@hookimpl
def register_attention_backends(register):
    register("paged_cpu", create_paged_cpu_backend)
