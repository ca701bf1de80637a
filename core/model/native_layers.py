"""A Llama decoder's layers in one C call (:file:`native_layers.c`), when every part of a layer runs in C.

A bfloat16 model on a CPU whose linear layers offer :meth:`native_matmul`
(the block kernel does), whose attention backend offers
:meth:`native_attention` (``paged_cpu`` does) and whose norms, SiLU·mul and
rotary run on :mod:`tercet.model.fused_ops` makes about 30 calls a layer from
Python for work that is already all in C. :class:`NativeLayers` hands the C
runner the same functions with the same arguments, once per step: a step's
output is the same bit for bit, and about 700 dispatched ops and 200 ctypes
calls a step are gone. A model with any other part (a bias, tensor
parallelism, another backend) runs layer by layer as before.

The descriptors of :mod:`tercet.model.native_calls` are the contract: a
linear layer or attention backend in a plugin offers them to be part of the
one call.

A step serving LoRA adapters stays in the one call where the model's LoRA
backend adds what the C runner adds (``native_equivalent``, the torch
backend): each run of rows sharing an adapter is a segment whose A and B the
runner reads in place (:func:`native_adapter`, made once per adapter).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass

import torch

from tercet.lora.lora_model import PROJECTIONS
from tercet.model.native_calls import NativeAttention
from tercet.plugin_host.native_build import NativeBuildError, NativeSource, load_library

logger = logging.getLogger(__name__)

SOURCE = NativeSource(__package__, "native_layers.c", "native_layers")
_P, _I64, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
# The cache's dtype as the attention kernel's signature numbers it.
BFLOAT16_CODE = 1
FAILURES = {10: "a linear layer's kernel failed", 20: "the attention kernel failed",
            30: "out of memory for the step's scratch"}
MAX_PARTS = 3  # of a fused projection (q, k and v)
ORDER = tuple(PROJECTIONS)  # the projections of a _LoraLayer: as the C file's QKV, O, GATE_UP, DOWN


class _Matmul(ctypes.Structure):
    _fields_ = [("function", _P), ("weights", _P), ("kind", _I64), ("out_features", _I64), ("in_features", _I64)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", _P), ("post_attention_norm", _P), ("qkv", _Matmul), ("o", _Matmul),
                ("gate_up", _Matmul), ("down", _Matmul), ("k_cache", _P), ("v_cache", _P)]


class _Program(ctypes.Structure):
    _fields_ = [("norm", _P), ("silu_mul", _P), ("rotary", _P), ("attention", _P), ("cos_table", _P),
                ("signed_sin_table", _P), ("layers", ctypes.POINTER(_Layer)), ("num_layers", _I64),
                ("hidden_size", _I64), ("intermediate_size", _I64), ("num_heads", _I64), ("num_kv_heads", _I64),
                ("head_dim", _I64), ("split_keys", _I64), ("cache_dtype", _I64), ("eps", _F), ("scale", _F)]


class _LoraPart(ctypes.Structure):
    _fields_ = [("b_t", _P), ("column", _I64), ("rank_start", _I64), ("rank_stop", _I64), ("out_features", _I64)]


class _LoraProjection(ctypes.Structure):
    _fields_ = [("a_t", _P), ("rank", _I64), ("num_parts", _I64), ("parts", _LoraPart * MAX_PARTS)]


class _LoraLayer(ctypes.Structure):
    _fields_ = [("projections", _LoraProjection * len(ORDER))]


class _LoraSegment(ctypes.Structure):
    _fields_ = [("start", _I64), ("stop", _I64), ("layers", ctypes.POINTER(_LoraLayer))]


class _Step(ctypes.Structure):
    _fields_ = [("positions", _P), ("req_to_token", _P), ("rows", _P), ("seq_lens", _P), ("out_cache_loc", _P),
                ("table_width", _I64), ("segments", ctypes.POINTER(_LoraSegment)), ("num_segments", _I64),
                ("max_rank", _I64)]


@dataclass(frozen=True)
class NativeAdapter:
    """An adapter's weights as the C runner reads them: per layer, each projection's A^T and B^Ts."""

    layers: ctypes.Array  # of _LoraLayer, pointing into the adapter's tensors (which outlive it)
    max_rank: int


def _transposed_bfloat16(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` (``[out, in]``) is a view of a contiguous ``[in, out]`` bfloat16 tensor on the CPU."""
    return tensor.dtype == torch.bfloat16 and tensor.device.type == "cpu" and tensor.t().is_contiguous()


def _projection_of(weights) -> _LoraProjection | None:
    parts = weights.parts
    if len(parts) > MAX_PARTS or not all(_transposed_bfloat16(t) for t in (weights.lora_a, *(p.lora_b for p in parts))):
        return None
    described = [_LoraPart(part.lora_b.data_ptr(), part.column, part.rank_start, part.rank_stop,
                           part.lora_b.shape[0]) for part in parts]
    return _LoraProjection(weights.lora_a.data_ptr(), weights.lora_a.shape[0], len(parts),
                           (_LoraPart * MAX_PARTS)(*described))


def native_adapter(weights, num_layers: int) -> NativeAdapter | None:
    """``weights`` (an :class:`tercet.lora.lora_linear.AdapterWeights`) for the C runner, made once and
    kept on them; None where a tensor is not laid out as the runner reads it (the step then runs
    layer by layer, through the LoRA backend)."""
    if weights.native is None:
        layers = (_LoraLayer * num_layers)()
        for (layer, projection), projection_weights in weights.items():
            described = _projection_of(projection_weights)
            if described is None:
                weights.native = False
                return None
            layers[layer].projections[ORDER.index(projection)] = described
        weights.native = NativeAdapter(layers, max(w.lora_a.shape[0] for w in weights.values()))
    return weights.native or None


@functools.cache
def load_layers_runner():
    """The runner's C function, built first if this machine has none (None where it cannot be built)."""
    try:
        function = load_library(SOURCE).tercet_run_layers
    except NativeBuildError as error:
        logger.warning("the model's layers run one call at a time from Python: %s", error)
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.POINTER(_Program), ctypes.POINTER(_Step), _P, _I64]
    return function


def _matmul_of(linear) -> _Matmul | None:
    offer = getattr(linear, "native_matmul", None)
    described = offer() if offer is not None else None
    if described is None:
        return None
    return _Matmul(described.function, described.weights, described.kind, described.out_features,
                   described.in_features)


def _attention_of(backend) -> NativeAttention | None:
    offer = getattr(backend, "native_attention", None)
    return offer() if offer is not None else None


def _runs_in_bfloat16_alone(model, kv_cache) -> bool:
    """bfloat16 with the fused steps (float32 keeps torch's ops), on one rank (no all-reduce between layers)."""
    return (model.fused_ops is not None and not model.tp.enabled and model.dtype == torch.bfloat16
            and kv_cache.dtype == torch.bfloat16)


def _layer_of(layer, k_cache: torch.Tensor, v_cache: torch.Tensor) -> _Layer | None:
    attention, mlp = layer.self_attn, layer.mlp
    matmuls = [_matmul_of(linear) for linear in (attention.qkv_proj, attention.o_proj, mlp.gate_up_proj,
                                                   mlp.down_proj)]
    if any(matmul is None for matmul in matmuls):
        return None
    return _Layer(layer.input_layernorm.weight.data_ptr(), layer.post_attention_layernorm.weight.data_ptr(),
                  *matmuls, k_cache.data_ptr(), v_cache.data_ptr())


class NativeLayers:
    """The program of one model's layers over one attention backend and KV cache; :meth:`run` per step."""

    def __init__(self, runner, program: _Program, layers, backend, keep_alive: tuple):
        self.runner = runner
        self.program = program
        self.layers = layers  # the ctypes array the program points into
        self.backend = backend
        self.keep_alive = keep_alive
        self.adapter_steps = 0  # steps run with adapters' deltas added here (what tests check)

    @classmethod
    def build(cls, model, backend, kv_cache) -> NativeLayers | None:
        """The program of ``model`` (a :class:`tercet.model.llama.LlamaForCausalLM` with its fused ops
        set), or None where any part of a layer does not run in C."""
        attention = _attention_of(backend)
        runner = load_layers_runner() if attention is not None and _runs_in_bfloat16_alone(model, kv_cache) else None
        if runner is None:
            return None
        layers = [_layer_of(layer, kv_cache.k_buffers[i], kv_cache.v_buffers[i])
                  for i, layer in enumerate(model.model.layers)]
        if any(layer is None for layer in layers):
            return None
        fused = model.fused_ops
        array = (_Layer * len(layers))(*layers)
        shape, layout = model.shape, model.attention_layout()
        program = _Program(
            fused.function_address("norm"), fused.function_address("silu_mul"), fused.function_address("rotary"),
            attention.function, model.rotary.cos_table.data_ptr(), model.rotary.signed_sin_table.data_ptr(),
            array, len(layers), shape.hidden_size, shape.intermediate_size, layout.num_heads, layout.num_kv_heads,
            layout.head_dim, attention.split_keys, BFLOAT16_CODE, shape.rms_norm_eps, layout.scaling,
        )
        return cls(runner, program, array, backend, (model.rotary.cos_table, model.rotary.signed_sin_table))

    def segments_of(self, lora_runs) -> list[tuple[int, int, NativeAdapter]] | None:
        """The step's adapter runs as the C runner reads them; None where one cannot be (run layer by layer)."""
        segments = []
        for run in lora_runs:
            adapter = native_adapter(run.weights, self.program.num_layers)
            if adapter is None:
                return None
            segments.append((run.start, run.stop, adapter))
        return segments

    def run(self, hidden: torch.Tensor, positions: torch.Tensor, segments=()) -> torch.Tensor:
        """Every layer over ``hidden`` (``[T, hidden]`` bfloat16, contiguous), in place; returns it.
        ``segments`` (from :meth:`segments_of`) add their adapters' deltas after each projection."""
        req_to_token, rows, seq_lens, out_cache_loc = self.backend.native_step()
        described = (_LoraSegment * max(len(segments), 1))(
            *(_LoraSegment(start, stop, adapter.layers) for start, stop, adapter in segments))
        step = _Step(positions.data_ptr(), req_to_token.data_ptr(), rows.data_ptr(), seq_lens.data_ptr(),
                     out_cache_loc.data_ptr(), req_to_token.stride(0), described, len(segments),
                     max((adapter.max_rank for _, _, adapter in segments), default=0))
        failed = self.runner(ctypes.byref(self.program), ctypes.byref(step), hidden.data_ptr(), hidden.shape[0])
        if failed:
            raise RuntimeError(f"the native layer runner failed: {FAILURES.get(failed, failed)}")
        self.adapter_steps += bool(segments)
        return hidden

