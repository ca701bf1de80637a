"""The fused CPU steps of a Llama layer (:file:`cpu_fused_ops.c`): RMSNorm with its residual add, SiLU·mul, rotary.

Used for bfloat16 on a CPU when ``model.native_kernels`` allows (the default)
and the C source builds here, by :class:`tercet.model.fused_layers.FusedCpuLayers`
and the one call (:mod:`tercet.model.native_layers`); the model runs torch's ops
otherwise, and layer by layer always in float32, whose output must equal
transformers' token for token.
The C file says how close each step is to torch's.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import torch

from tercet.native.build import NativeBuildError, NativeSource, load_library
from tercet.native.cpu import level_in_use
from tercet.native.levels import IsaLevel

logger = logging.getLogger(__name__)

SOURCE = NativeSource(__package__, "cpu_fused_ops.c", "cpu_fused_ops")
# The same steps over float32, for the one-call runner of a float32 model's few-row steps only
# (tercet.model.native_layers): layer by layer, float32 keeps torch's ops.
FLOAT32_SOURCE = NativeSource(__package__, "cpu_fused_ops.c", "cpu_fused_ops_f32",
                              (*SOURCE.flags, "-DTERCET_FLOAT32_ACTIVATIONS"))
_P, _I64, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


def _rows(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` as ``[rows, width]`` with its last dimension contiguous."""
    rows = tensor.reshape(-1, width)
    return rows if rows.stride(1) == 1 else rows.contiguous()


class CpuFusedOps:
    """The C functions, over tensors of the library's dtype (bfloat16, or float32 for
    :data:`FLOAT32_SOURCE`) whose last dimension is contiguous."""

    def __init__(self, library: ctypes.CDLL):
        self.library = library
        self.add_rms_norm = library.tercet_add_rms_norm
        self.add_rms_norm.argtypes = [_P, _I64, _P, _I64, _P, _F, _I64, _I64, _P, _I64]
        self.silu_mul_rows = library.tercet_silu_mul
        self.silu_mul_rows.argtypes = [_P, _I64, _I64, _I64, _P, _I64]
        self.rotary_rows = library.tercet_rotary
        self.rotary_rows.argtypes = [_P, _I64, _I64, _I64, _I64, _P, _P, _P]
        for function in (self.add_rms_norm, self.silu_mul_rows, self.rotary_rows):
            function.restype = None

    def function_address(self, step: str) -> int:
        """The address of a step's C function (``norm``, ``silu_mul`` or ``rotary``), for a caller in C."""
        names = {"norm": "tercet_add_rms_norm", "silu_mul": "tercet_silu_mul", "rotary": "tercet_rotary"}
        return ctypes.cast(getattr(self.library, names[step]), ctypes.c_void_p).value

    def rms_norm(self, hidden: torch.Tensor, weight: torch.Tensor, eps: float,
                 addend: torch.Tensor | None = None) -> torch.Tensor:
        """RMSNorm(hidden) · weight; with ``addend``, ``hidden += addend`` first, in place."""
        width = hidden.shape[-1]
        rows = hidden.view(-1, width)  # in place: hidden must be a whole, row-contiguous tensor
        out = torch.empty_like(rows)
        extra = None if addend is None else _rows(addend, width)
        self.add_rms_norm(
            rows.data_ptr(), rows.stride(0), None if extra is None else extra.data_ptr(),
            0 if extra is None else extra.stride(0), weight.data_ptr(), eps, rows.shape[0], width,
            out.data_ptr(), out.stride(0),
        )
        return out.view(hidden.shape)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """SiLU(gate) · up, for ``gate_up`` = ``[..., gate | up]``."""
        width = gate_up.shape[-1] // 2
        rows = _rows(gate_up, 2 * width)
        out = torch.empty(rows.shape[0], width, dtype=gate_up.dtype)
        self.silu_mul_rows(rows.data_ptr(), rows.stride(0), rows.shape[0], width, out.data_ptr(), out.stride(0))
        return out.view(*gate_up.shape[:-1], width)

    def rotary_(self, qkv: torch.Tensor, heads: int, head_dim: int, positions: torch.Tensor,
                cos_table: torch.Tensor, signed_sin_table: torch.Tensor) -> None:
        """Rotate the first ``heads`` heads of each row of ``qkv`` ``[T, width]`` in place."""
        positions = positions if positions.dtype == torch.int64 and positions.is_contiguous() else (
            positions.to(torch.int64).contiguous())
        self.rotary_rows(
            qkv.data_ptr(), qkv.stride(0), qkv.shape[0], heads, head_dim, positions.data_ptr(),
            cos_table.data_ptr(), signed_sin_table.data_ptr(),
        )


def _loaded(source: NativeSource, otherwise: str) -> CpuFusedOps | None:
    """The steps of ``source`` at the level in use, or None where they cannot be built (the log says why,
    and ``otherwise``)."""
    return _loaded_at(source, otherwise, level_in_use())


@functools.cache
def _loaded_at(source: NativeSource, otherwise: str, level: IsaLevel) -> CpuFusedOps | None:
    try:
        return CpuFusedOps(load_library(source, level=level))
    except NativeBuildError as error:
        logger.warning("%s: %s", otherwise, error)
        return None


def float32_fused_ops() -> CpuFusedOps | None:
    """The steps over float32 rows, or None where they cannot be built."""
    return _loaded(FLOAT32_SOURCE, "a float32 model's steps run layer by layer")


def cpu_fused_ops_for(device: torch.device, dtype: torch.dtype, allowed: bool) -> CpuFusedOps | None:
    """The fused ops for a model on ``device`` in ``dtype``, or None where torch's ops run."""
    if not allowed or device.type != "cpu" or dtype != torch.bfloat16:
        return None
    return _loaded(SOURCE, "the model's norms, SiLU and rotary run as torch ops")


def runner_steps_for(device: torch.device, dtype: torch.dtype, allowed: bool) -> CpuFusedOps | None:
    """The steps the one-call layer runner calls for a model on ``device`` in ``dtype`` (bfloat16's
    fused ops, or their float32 build), or None: no one call."""
    if allowed and device.type == "cpu" and dtype == torch.float32:
        return float32_fused_ops()
    return cpu_fused_ops_for(device, dtype, allowed)
