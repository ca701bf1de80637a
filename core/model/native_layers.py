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

A step the one call does not take (more tokens than a kernel takes, adapters it
cannot add) runs layer by layer on the runner it was built with
(:attr:`NativeLayers.layer_by_layer`: the fused steps in bfloat16, torch's ops in
float32), so :class:`NativeLayers` is a whole layer runner
(:mod:`tercet.model.layer_runner`).

A float32 model runs its steps in one call too (the C file built over float32,
:data:`FLOAT32_SOURCE`): its linear layers' float32 functions (the few-rows
kernel of dense layers, up to 16 tokens; the block kernel of GGUF block layers,
any number), ``paged_cpu`` over a float32 cache and the float32 build of the
fused steps. Those steps round as float32 does but not in torch's order, so they
are within float32's rounding of the layers one by one, not equal bit for bit
(greedy output still equals transformers' on the tests' prompts). Longer
steps and steps with adapters run layer by layer, on torch's ops.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass

import torch

from tercet.lora.lora_model import PROJECTIONS
from tercet.model.forward_batch import ForwardBatch
from tercet.model.fused_ops import CpuFusedOps
from tercet.model.layer_runner import LayerRunner
from tercet.model.native_calls import NativeAttention, NativeMatmul
from tercet.native.build import NativeBuildError, NativeSource, load_library
from tercet.native.cpu import level_in_use
from tercet.native.levels import IsaLevel

logger = logging.getLogger(__name__)

SOURCE = NativeSource(__package__, "native_layers.c", "native_layers")
FLOAT32_SOURCE = NativeSource(__package__, "native_layers.c", "native_layers_f32",
                              (*SOURCE.flags, "-DTERCET_FLOAT32_ACTIVATIONS"))
_P, _I64, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
# Each dtype the runner is built for: its source, its name in NativeMatmul, and the code the
# attention kernel's signature gives it (the cache's dtype).
BUILDS = {torch.bfloat16: (SOURCE, "bfloat16", 1), torch.float32: (FLOAT32_SOURCE, "float32", 0)}
FAILURES = {10: "a linear layer's kernel failed", 20: "the attention kernel failed",
            30: "out of memory for the step's scratch"}
MAX_PARTS = 3  # of a fused projection (q, k and v)
ORDER = tuple(PROJECTIONS)  # the projections of a _LoraLayer: as the C file's QKV, O, GATE_UP, DOWN


class _Matmul(ctypes.Structure):
    _fields_ = [("function", _P), ("weights", _P), ("kind", _I64), ("out_features", _I64), ("in_features", _I64)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", _P), ("post_attention_norm", _P), ("qkv", _Matmul), ("o", _Matmul),
                ("gate_up", _Matmul), ("down", _Matmul), ("k_cache", _P), ("v_cache", _P), ("k_scales", _P),
                ("v_scales", _P)]


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


def load_layers_runner(dtype: torch.dtype = torch.bfloat16):
    """The runner's C function over ``dtype`` at the level in use, built first if this machine has none
    (None where it cannot be built)."""
    return _layers_runner_at(dtype, level_in_use())


@functools.cache
def _layers_runner_at(dtype: torch.dtype, level: IsaLevel):
    try:
        function = load_library(BUILDS[dtype][0], level=level).tercet_run_layers
    except NativeBuildError as error:
        logger.warning("the model's layers run one call at a time from Python: %s", error)
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.POINTER(_Program), ctypes.POINTER(_Step), _P, _I64]
    return function


def _offer_of(linear, dtype_name: str) -> NativeMatmul | None:
    offer = getattr(linear, "native_matmul", None)
    described = offer() if offer is not None else None
    return described if described is not None and described.dtype == dtype_name else None


def _matmul_of(described: NativeMatmul) -> _Matmul:
    return _Matmul(described.function, described.weights, described.kind, described.out_features,
                   described.in_features)


def _attention_of(backend) -> NativeAttention | None:
    offer = getattr(backend, "native_attention", None)
    return offer() if offer is not None else None


def _refusal_of(model, kv_cache, attention: NativeAttention | None) -> str | None:
    """Why ``model`` cannot run on its own in one call (None: it may): a dtype the runner is built for,
    its cache's, its attention in C, on one rank (no all-reduce between layers)."""
    if model.tp.enabled:
        return "tensor parallelism all-reduces between layers"
    if model.dtype not in BUILDS:
        return f"the one call is built for {' and '.join(name for _, name, _ in BUILDS.values())}, not {model.dtype}"
    if attention is None:
        return "the attention backend offers no C function"
    if kv_cache.dtype != model.dtype and attention.code_of(_name_of(kv_cache.dtype)) is None:
        return f"the KV cache is {kv_cache.dtype}, the model {model.dtype}"
    return None


def _name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cache_code(model, kv_cache, attention: NativeAttention) -> int:
    """The code the attention function takes for the cache's dtype."""
    code = attention.code_of(_name_of(kv_cache.dtype))
    return code if code is not None else BUILDS[model.dtype][2]


def _offers_of(layer, dtype_name: str) -> list[NativeMatmul] | str:
    """A layer's four matmuls as C functions over ``dtype_name``, or which one is not."""
    attention, mlp = layer.self_attn, layer.mlp
    projections = {"qkv_proj": attention.qkv_proj, "o_proj": attention.o_proj, "gate_up_proj": mlp.gate_up_proj,
                   "down_proj": mlp.down_proj}
    offers = [_offer_of(linear, dtype_name) for linear in projections.values()]
    missing = [name for name, offer in zip(projections, offers) if offer is None]
    return offers if not missing else f"{missing[0]} ({type(projections[missing[0]]).__name__})"


def _every_layers_offers(model) -> list[list[NativeMatmul]] | str:
    """Each layer's four matmuls as C functions over the model's dtype; or why not, naming the first that is not."""
    dtype_name = BUILDS[model.dtype][1]
    offers = []
    for index, layer in enumerate(model.model.layers):
        layer_offers = _offers_of(layer, dtype_name)
        if isinstance(layer_offers, str):
            return f"layer {index}'s {layer_offers} offers no C function over {dtype_name}"
        offers.append(layer_offers)
    return offers


def _layer_of(layer, offers: list[NativeMatmul], kv_cache, index: int) -> _Layer:
    """Layer ``index``'s norms, matmuls and cache buffers (with a quantized cache's row scales)."""
    scales = (None, None) if kv_cache.k_scales is None else (kv_cache.k_scales[index].data_ptr(),
                                                             kv_cache.v_scales[index].data_ptr())
    return _Layer(layer.input_layernorm.weight.data_ptr(), layer.post_attention_layernorm.weight.data_ptr(),
                  *(_matmul_of(offer) for offer in offers), kv_cache.k_buffers[index].data_ptr(),
                  kv_cache.v_buffers[index].data_ptr(), *scales)


class NativeLayers:
    """The program of one model's layers over one attention backend and KV cache, run in one C call
    per step; the steps it does not take run on ``layer_by_layer``."""

    def __init__(self, runner, program: _Program, layers, backend, keep_alive: tuple, layer_by_layer: LayerRunner,
                 max_rows: int = 0, adds_adapters: bool = True):
        self.runner = runner
        self.program = program
        self.layers = layers  # the ctypes array the program points into
        self.backend = backend
        self.keep_alive = keep_alive
        self.layer_by_layer = layer_by_layer
        self.max_rows = max_rows  # the most tokens a step may have to run here; 0: any number
        self.adds_adapters = adds_adapters
        self.adapter_steps = 0  # steps run with adapters' deltas added here (what tests check)
        self.steps = 0  # steps run here (what tests check)

    def takes(self, num_tokens: int) -> bool:
        """Whether a step of ``num_tokens`` tokens runs here (else layer by layer)."""
        return self.max_rows == 0 or num_tokens <= self.max_rows

    @classmethod
    def build(cls, model, backend, kv_cache, steps: CpuFusedOps, layer_by_layer: LayerRunner) -> NativeLayers | str:
        """The program of ``model`` (a :class:`tercet.model.llama.LlamaForCausalLM`), its norms, SiLU·mul and
        rotary on ``steps``; or, where any part of a layer does not run in C, why not (a phrase for the log)."""
        attention = _attention_of(backend)
        refusal = _refusal_of(model, kv_cache, attention)
        offers = _every_layers_offers(model) if refusal is None else refusal
        if isinstance(offers, str):
            return offers
        runner = load_layers_runner(model.dtype)
        if runner is None:
            return "the one call's C file does not build here (the warning above says why)"
        layers = [_layer_of(layer, layer_offers, kv_cache, i)
                  for i, (layer, layer_offers) in enumerate(zip(model.model.layers, offers))]
        limits = [offer.max_rows for layer_offers in offers for offer in layer_offers if offer.max_rows]
        array = (_Layer * len(layers))(*layers)
        return cls(runner, _program_of(model, steps, attention, array, _cache_code(model, kv_cache, attention)), array,
                   backend,
                   (model.rotary.cos_table, model.rotary.signed_sin_table), layer_by_layer, min(limits, default=0),
                   adds_adapters=model.dtype == torch.bfloat16)

    def run(self, hidden: torch.Tensor, batch: ForwardBatch, native_lora: bool) -> torch.Tensor:
        """The step in one call where it takes it (its adapters too, where ``native_lora`` says the LoRA
        backend adds what the C runner adds), else layer by layer."""
        segments = self._segments_of(batch, native_lora)
        if segments is None:
            return self.layer_by_layer.run(hidden, batch, native_lora)
        return self.run_in_one_call(hidden.contiguous(), batch.positions, segments)

    def _segments_of(self, batch: ForwardBatch, native_lora: bool) -> list | None:
        """The step's adapter segments for the one call ([] with none); None: run layer by layer (more tokens
        than it takes, or adapters whose deltas it cannot add: they go through the LoRA backend)."""
        if not self.takes(batch.num_tokens):
            return None
        if not batch.lora_runs:
            return []
        return self.segments_of(batch.lora_runs) if native_lora else None

    def segments_of(self, lora_runs) -> list[tuple[int, int, NativeAdapter]] | None:
        """The step's adapter runs as the C runner reads them; None where one cannot be (run layer by layer)."""
        if not self.adds_adapters:
            return None
        segments = []
        for run in lora_runs:
            adapter = native_adapter(run.weights, self.program.num_layers)
            if adapter is None:
                return None
            segments.append((run.start, run.stop, adapter))
        return segments

    def run_in_one_call(self, hidden: torch.Tensor, positions: torch.Tensor, segments=()) -> torch.Tensor:
        """Every layer over ``hidden`` (``[T, hidden]`` in the model's dtype, contiguous), in place; returns it.
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
        self.steps += 1
        return hidden


def _program_of(model, steps: CpuFusedOps, attention: NativeAttention, layers, cache_code: int) -> _Program:
    """What the C runner reads of every layer: the steps' functions, the tables, the sizes."""
    shape, layout = model.shape, model.attention_layout()
    return _Program(
        steps.function_address("norm"), steps.function_address("silu_mul"), steps.function_address("rotary"),
        attention.function, model.rotary.cos_table.data_ptr(), model.rotary.signed_sin_table.data_ptr(),
        layers, len(layers), shape.hidden_size, shape.intermediate_size, layout.num_heads, layout.num_kv_heads,
        layout.head_dim, attention.split_keys, cache_code, shape.rms_norm_eps, layout.scaling,
    )
