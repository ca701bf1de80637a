"""The built-in attention backend ``paged_cpu``: decode attention read in place from the paged cache.

Decoding steps run a small C kernel, compiled once per machine into tercet's
cache (``-march=native``: for the CPU it runs on) and loaded with ctypes; steps
with prompt tokens run as ``torch_native``. Where the kernel cannot be used
(not a CPU, a dtype it does not take, no C compiler) the backend is
``torch_native``, and the log says why once. With ``model.deterministic`` every
step runs the kernel, prompt tokens too (see :mod:`.backend`). This module is imported in every
process, so torch is only imported when the backend is built.
"""

import logging

from tercet.plugin_api import ConfigError, hookimpl

logger = logging.getLogger(__name__)


def create_paged_cpu_backend(layout):
    from tercet.plugins.paged_cpu_attention.backend import DTYPE_CODES, PagedCpuAttentionBackend
    from tercet.plugins.paged_cpu_attention.build import KernelUnavailable, load_kernel
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    if layout.device.type != "cpu" or layout.dtype not in DTYPE_CODES:
        if layout.deterministic:
            raise ConfigError(f"model.deterministic = true needs the paged_cpu kernel, which runs on a CPU in "
                              f"float32 or bfloat16, not on {layout.device.type} in {layout.dtype}")
        return TorchNativeAttentionBackend(layout)
    try:
        kernel = load_kernel(layout)
    except KernelUnavailable as error:
        if layout.deterministic:
            raise ConfigError(f"model.deterministic = true needs the paged_cpu kernel: {error}") from None
        logger.warning("attention.backend paged_cpu runs as torch_native: %s", error)
        return TorchNativeAttentionBackend(layout)
    return PagedCpuAttentionBackend(layout, kernel)


@hookimpl
def register_attention_backends(register):
    register("paged_cpu", create_paged_cpu_backend)
