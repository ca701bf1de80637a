"""``[cache] kv_dtype``: the dtype the KV pool stores, and where a quantized one can run.

"auto" stores the activations' dtype; "bfloat16" and "float32" store that dtype
whatever the activations' (the attention backend converts as it reads). "int8"
and "fp8_e4m3" store each token's K and V rows quantized, with a float16 scale
per token and KV head (:mod:`tercet.model.kv_cache`): about half the bytes of
bfloat16, so about twice the tokens in ``model.kv_cache_memory``. Only the
``paged_cpu`` kernel reads them in place, so a quantized cache needs a CPU and
one process per rank (no tensor parallelism); anything else is refused at
start-up, naming the setting.
"""

from __future__ import annotations

import torch

from tercet.errors import ConfigError
from tercet.model.kv_cache import QUANTIZED_KV_DTYPES

# The config's names of the dtypes a pool can store ("auto" resolves to one of them).
KV_DTYPES = {
    "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn,
}


def resolve_kv_dtype(name: str, activation_dtype: torch.dtype) -> torch.dtype:
    """The dtype the pool stores for ``cache.kv_dtype = name`` with activations in ``activation_dtype``."""
    if name == "auto":
        return activation_dtype
    try:
        return KV_DTYPES[name]
    except KeyError:
        raise ConfigError(f"cache.kv_dtype {name!r} is not one of auto, {', '.join(KV_DTYPES)}") from None


def kv_dtype_name(dtype: torch.dtype) -> str:
    """``dtype`` as ``cache.kv_dtype`` names it (``fp8_e4m3``), or torch's name for one it does not."""
    for name, named in KV_DTYPES.items():
        if named == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def is_quantized_kv_dtype(dtype: torch.dtype) -> bool:
    return dtype in QUANTIZED_KV_DTYPES


def check_quantized_cache_runs(kv_dtype: torch.dtype, device: torch.device, tp_size: int) -> None:
    """A ConfigError naming ``cache.kv_dtype`` where a quantized cache cannot run: not on a CPU, or
    sharded over tensor-parallel ranks (neither is built for its scales)."""
    if not is_quantized_kv_dtype(kv_dtype):
        return
    setting = f'cache.kv_dtype = "{kv_dtype_name(kv_dtype)}"'
    if device.type != "cpu":
        raise ConfigError(f"{setting} is read in place only by the paged_cpu kernel, on a CPU; the model runs on "
                          f'{device.type}: set cache.kv_dtype = "auto" (or "bfloat16")')
    if tp_size > 1:
        raise ConfigError(f"{setting} is not supported with tensor parallelism (parallel.tp_size = {tp_size}): "
                          'set cache.kv_dtype = "auto" or parallel.tp_size = 1')
