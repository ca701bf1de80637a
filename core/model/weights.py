"""Load a checkpoint into the lean model, each linear layer made by its linear method.

Checkpoint tensors arrive one at a time (:class:`tercet.formats.checkpoint.Checkpoint`).
Norms and the embedding are copied into the model's parameters; every linear
layer is handed to a linear method once all its parts have arrived (q/k/v
join into the fused ``qkv_proj``, gate/up into ``gate_up_proj``), and the
layer the method makes replaces the model's placeholder. Which method makes
which layer is :class:`LinearMethodChoice`'s answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from tercet.errors import ConfigError
from tercet.formats.checkpoint import Checkpoint
from tercet.formats.gguf_blocks import BlockQuantized, quantize_blocks
from tercet.formats.read_ahead import read_ahead
from tercet.model.linear_method import LinearMethod, LinearTarget
from tercet.model.llama import LlamaForCausalLM
from tercet.model.quantized_embedding import BlockQuantizedEmbedding

# checkpoint name fragment -> (fused parameter fragment, part)
FUSED_PROJECTIONS = {
    ".self_attn.q_proj.": (".self_attn.qkv_proj.", "q"),
    ".self_attn.k_proj.": (".self_attn.qkv_proj.", "k"),
    ".self_attn.v_proj.": (".self_attn.qkv_proj.", "v"),
    ".mlp.gate_proj.": (".mlp.gate_up_proj.", "gate"),
    ".mlp.up_proj.": (".mlp.gate_up_proj.", "up"),
}
PART_ORDER = {"qkv_proj": ("q", "k", "v"), "gate_up_proj": ("gate", "up")}

# Checkpoint tensors that the lean model recomputes rather than loads.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head"
FOUR_BIT_METHODS = ("q4_0", "q4_1")
HEAD_METHOD_FOR_FOUR_BIT = "q8_0"
# When fused parts come in different block formats, they join in the most precise.
PRECISION_RANK = {"Q4_0": 0, "Q4_1": 1, "Q8_0": 2}


@dataclass(frozen=True)
class LinearMethodChoice:
    """``[model] quantization`` resolved: the method for each linear layer.

    ``fixed`` is the method every layer uses (``"dense"`` for ``none``, or the
    named one); ``None`` means ``auto``: each layer keeps its checkpoint
    tensor's format (a block format's method by its lower-case name, dense
    tensors ``dense``). ``methods`` are the registered method factories."""

    fixed: str | None
    methods: Mapping[str, Callable[[], LinearMethod]]
    # Rows from which quantized layers run on a dense copy (LinearTarget.dense_from_rows).
    dense_from_rows: int = 0
    # Whether methods may use tercet's own kernels (LinearTarget.native_kernels).
    native_kernels: bool = True
    _made: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_quantization(
        cls, quantization: str, methods: Mapping[str, Callable[[], LinearMethod]], dense_from_rows: int = 0,
        native_kernels: bool = True,
    ):
        fixed = {"auto": None, "none": "dense"}.get(quantization, quantization)
        if fixed is not None and fixed not in methods:
            available = ", ".join(["auto", "none", *sorted(methods)])
            raise ConfigError(f"model.quantization {quantization!r} is not a linear method; available: {available}")
        return cls(fixed, methods, dense_from_rows, native_kernels)

    def name_for(self, weight, module_name: str) -> str:
        if self.fixed is not None:
            if module_name == LM_HEAD and self.fixed in FOUR_BIT_METHODS and HEAD_METHOD_FOR_FOUR_BIT in self.methods:
                # 4 bits are too coarse for the LM head (greedy top-1 agreement
                # with the dequantized weights falls from 95% to 58% on the
                # default model): it gets 8 bits, as GGUF's 4-bit files do.
                return HEAD_METHOD_FOR_FOUR_BIT
            return self.fixed
        return weight.type_name.lower() if isinstance(weight, BlockQuantized) else "dense"

    def method(self, name: str) -> LinearMethod:
        if name not in self._made:
            if name not in self.methods:
                raise ConfigError(f"no linear method {name!r} is registered for this checkpoint's tensors")
            self._made[name] = self.methods[name]()
        return self._made[name]

    @property
    def dequantizes_embedding(self) -> bool:
        return self.fixed == "dense"


@dataclass
class LoadReport:
    """Which method made each linear layer, for /get_server_info and the start-up log."""

    layers_by_method: dict[str, int] = field(default_factory=dict)
    weight_bytes: int = 0

    def count(self, method: str) -> None:
        self.layers_by_method[method] = self.layers_by_method.get(method, 0) + 1

    @property
    def weight_format(self) -> str:
        return ", ".join(f"{name} ({count} layers)" for name, count in sorted(self.layers_by_method.items()))


def load_weights(model: LlamaForCausalLM, checkpoint: Checkpoint, choice: LinearMethodChoice) -> LoadReport:
    """Fill ``model`` from ``checkpoint``; raise a ConfigError naming what is missing or wrong."""
    loading = _Loading(model, choice)
    with torch.no_grad():
        # Check every layer against a fixed method before any weight is made:
        # a misfit is found at once, not after most of the model has loaded.
        loading.check_the_fixed_method()
        for checkpoint_name, tensor in read_ahead(checkpoint.tensors()):
            if not checkpoint_name.endswith(IGNORED_SUFFIXES):
                loading.take(checkpoint_name, tensor)
        loading.tie_the_head()
    missing = loading.missing()
    if missing:
        raise ConfigError(f"checkpoint {checkpoint.path} lacks weights for: {', '.join(missing)}")
    loading.report.weight_bytes = _weight_bytes(model)
    return loading.report


class _Loading:
    """One load under way: the parts of each linear layer that have arrived, the other parameters filled so far."""

    def __init__(self, model: LlamaForCausalLM, choice: LinearMethodChoice):
        self.model = model
        self.choice = choice
        self.report = LoadReport()
        self.linear_shapes = _linear_shapes(model)
        # Parts of each linear layer that have arrived: ("weight" | "bias", part) -> tensor.
        self.pending: dict[str, dict[tuple[str, str | None], object]] = {}
        self.parameters = {
            name: parameter for name, parameter in model.named_parameters()
            if name.rpartition(".")[0] not in self.linear_shapes
        }
        self.filled: set[str] = set()
        self.embedding_weight = None

    def check_the_fixed_method(self) -> None:
        if self.choice.fixed is None:
            return
        for name, (out_features, in_features) in self.linear_shapes.items():
            method = self.choice.method(self.choice.name_for(None, name))
            method.check(out_features, in_features, _target(self.model, name))

    def take(self, checkpoint_name: str, tensor) -> None:
        """Put one checkpoint tensor in its place (a linear layer is made once all its parts are here)."""
        module_name, part, kind = _place_of(checkpoint_name)
        if module_name in self.linear_shapes:
            self.take_linear_part(module_name, part, kind, tensor)
            return
        if checkpoint_name == EMBEDDING:
            self.embedding_weight = tensor
            _fill_embedding(self.model, tensor, self.choice)
        elif checkpoint_name in self.parameters:
            _copy_into(self.parameters[checkpoint_name], checkpoint_name, _dense(tensor))
        elif not (checkpoint_name == "lm_head.weight" and self.model.shape.tie_word_embeddings):
            raise ConfigError(f"checkpoint tensor {checkpoint_name!r} has no place in the Llama model")
        self.filled.add(checkpoint_name)

    def take_linear_part(self, module_name: str, part: str | None, kind: str, tensor) -> None:
        parts = self.pending.setdefault(module_name, {})
        # With tensor parallelism, only this rank's slice is kept.
        parts[(kind, part)] = self.model.shards.part(module_name, part, tensor, kind)
        if set(parts) >= _needed_parts(self.model, module_name):
            _make_linear(self.model, module_name, self.pending.pop(module_name), self.choice, self.report)

    def tie_the_head(self) -> None:
        """A tied LM head the checkpoint did not ship is made from the embedding's tensor, by the head's
        own method; a dense embedding lends its parameter, so a dense head shares it."""
        model = self.model
        if not model.shape.tie_word_embeddings or not _is_placeholder(model.lm_head) or self.embedding_weight is None:
            return
        if isinstance(model.model.embed_tokens, nn.Embedding):
            weight = model.model.embed_tokens.weight  # already this rank's rows
        else:
            weight = model.shards.vocab_rows(self.embedding_weight)
        _make_linear(model, LM_HEAD, {("weight", None): weight}, self.choice, self.report)

    def missing(self) -> list[str]:
        """What the checkpoint lacked: parameters, parts of linear layers, and whole linear layers."""
        missing = sorted(set(self.parameters) - self.filled)
        missing += sorted(self.missing_parts(name, parts) for name, parts in self.pending.items())
        missing += sorted(
            name for name in self.linear_shapes
            if name not in self.pending and _is_placeholder(self.model.get_submodule(name))
        )
        return missing

    def missing_parts(self, name: str, parts: dict) -> str:
        absent = sorted(_needed_parts(self.model, name) - set(parts))
        return f"{name} (no {', '.join(_part_name(part, kind) for kind, part in absent)})"


def _part_name(part: str | None, kind: str) -> str:
    return kind if part is None else f"{part}_proj.{kind}"


def _needed_parts(model: LlamaForCausalLM, module_name: str) -> set[tuple[str, str | None]]:
    parts = PART_ORDER.get(module_name.rpartition(".")[2], (None,))
    kinds = ("weight", "bias") if model.get_submodule(module_name).bias is not None else ("weight",)
    return {(kind, part) for kind in kinds for part in parts}


def _place_of(checkpoint_name: str) -> tuple[str, str | None, str]:
    """(module name, fused part or None, "weight" | "bias") of a checkpoint tensor."""
    base, _, kind = checkpoint_name.rpartition(".")
    for fragment, (fused_fragment, part) in FUSED_PROJECTIONS.items():
        if fragment in checkpoint_name:
            return (base + ".").replace(fragment, fused_fragment)[:-1], part, kind
    return base, None, kind


def _linear_shapes(model: LlamaForCausalLM) -> dict[str, tuple[int, int]]:
    return {
        name: (module.out_features, module.in_features)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }


def _target(model: LlamaForCausalLM, name: str, choice: LinearMethodChoice | None = None) -> LinearTarget:
    if choice is None:
        return LinearTarget(name=name, dtype=model.dtype, device=model.device)
    return LinearTarget(
        name=name, dtype=model.dtype, device=model.device, dense_from_rows=choice.dense_from_rows,
        native_kernels=choice.native_kernels,
    )


def _is_placeholder(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) and module.weight.is_meta


def _make_linear(model, module_name: str, parts: dict, choice: LinearMethodChoice, report: LoadReport) -> None:
    placeholder = model.get_submodule(module_name)
    order = PART_ORDER.get(module_name.rpartition(".")[2], (None,))
    weight = _joined([parts[("weight", part)] for part in order])
    expected = (placeholder.out_features, placeholder.in_features)
    if tuple(weight.shape) != expected:
        raise ConfigError(
            f"checkpoint weights of {module_name} have shape {tuple(weight.shape)}, expected {expected}"
        )
    bias = None
    if placeholder.bias is not None:
        bias = torch.cat([_dense(parts[("bias", part)]) for part in order])
    method_name = choice.name_for(weight, module_name)
    target = _target(model, module_name, choice)
    method = choice.method(method_name)
    method.check(*expected, target)
    layer = method.create(weight, bias, target)
    parent_name, _, child_name = module_name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child_name, layer)
    report.count(method_name)


def _joined(parts: list) -> object:
    """Fused parts as one weight along the output dimension."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(part, BlockQuantized) for part in parts):
        return _joined_blocks(parts)
    return _joined_dense([_dense(part) for part in parts])


def _joined_blocks(parts: list[BlockQuantized]) -> BlockQuantized:
    """Block-quantized parts, joined in the most precise of their formats."""
    best = max((part.type_name for part in parts), key=PRECISION_RANK.__getitem__)
    return BlockQuantized.concat(
        [part if part.type_name == best else quantize_blocks(part.dequantize(), best) for part in parts]
    )


def _joined_dense(parts: list[torch.Tensor]) -> torch.Tensor:
    """Dense parts, joined in their dtype (float32 when they differ)."""
    common = parts[0].dtype if len({part.dtype for part in parts}) == 1 else torch.float32
    return torch.cat([part.to(common) for part in parts])


def _dense(tensor) -> torch.Tensor:
    return tensor.dequantize() if isinstance(tensor, BlockQuantized) else tensor


def _fill_embedding(model: LlamaForCausalLM, tensor, choice: LinearMethodChoice) -> None:
    expected = (model.shape.vocab_size, model.shape.hidden_size)
    if tuple(tensor.shape) != expected:
        raise ConfigError(f"checkpoint tensor {EMBEDDING!r} has shape {tuple(tensor.shape)}, expected {expected}")
    tensor = model.shards.vocab_rows(tensor)
    if isinstance(tensor, BlockQuantized) and not choice.dequantizes_embedding:
        # Kept in its blocks: the embedding is looked up a row at a time.
        model.model.embed_tokens = BlockQuantizedEmbedding(tensor, model.dtype, model.device)
        return
    model.model.embed_tokens.weight.copy_(_dense(tensor))


def _copy_into(parameter: torch.Tensor, name: str, tensor: torch.Tensor) -> None:
    if parameter.shape != tensor.shape:
        raise ConfigError(f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(parameter.shape)}")
    parameter.copy_(tensor)


def _weight_bytes(model: nn.Module) -> int:
    """Bytes the model's weights occupy, counting each storage once."""
    seen: dict[int, int] = {}

    def visit(value) -> None:
        if isinstance(value, torch.Tensor) and not value.is_meta:
            try:
                storage = value.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
            except RuntimeError:  # an opaque oneDNN tensor
                seen[id(value)] = value.numel() * value.element_size()
        elif isinstance(value, BlockQuantized):
            for part in (value.codes, value.scales, value.mins):
                visit(part)

    for module in model.modules():
        for value in [*module.parameters(recurse=False), *module.buffers(recurse=False), *vars(module).values()]:
            visit(value)
    return sum(seen.values())
