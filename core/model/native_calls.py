"""What a linear layer or attention backend running in C offers to be called from C.

:mod:`tercet.model.native_layers` runs a model's layers in one C call when
every part of a layer offers one of these (``native_matmul()`` on a linear
layer, ``native_attention()`` and ``native_step()`` on an attention backend).
Kept free of torch: the plugin API, which every process imports, exports them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NativeMatmul:
    """A linear layer as a C function: ``int f(x, x_stride, rows, k, weights, kind, n, y, y_stride)``
    (x ``[rows, k]`` and y ``[rows, n]`` in ``dtype``, 0 on success) and what it multiplies by. A layer
    with a bias, which the function does not add, offers none."""

    function: int
    weights: int
    kind: int
    out_features: int
    in_features: int
    dtype: str = "bfloat16"  # of x and y: "bfloat16" or "float32"
    max_rows: int = 0  # the most rows the function takes in one call; 0: any number


@dataclass(frozen=True)
class NativeAttention:
    """An attention backend as a C function with ``paged_cpu``'s kernel signature (see its
    ``decode_attention.c``): it writes the new tokens' K/V and attends, reading the rows of
    the step that :meth:`native_step` returns (the table, rows, sequence lengths and slots)."""

    function: int
    split_keys: int
    # The code the function takes for each cache dtype it reads besides the activations' (by name:
    # "int8", "float8_e4m3fn"), each with its float16 row scales; a cache of another dtype runs layer by layer.
    cache_dtype_codes: tuple[tuple[str, int], ...] = ()

    def code_of(self, dtype_name: str) -> int | None:
        return dict(self.cache_dtype_codes).get(dtype_name)
