"""Reading one PEFT adapter directory, checked against the model it is to adapt.

A PEFT LoRA adapter is ``adapter_config.json`` (``r``, ``lora_alpha``,
``target_modules``, ``use_rslora``…) and ``adapter_model.safetensors``, whose
tensors are named ``…layers.<i>.self_attn.q_proj.lora_A.weight`` (``[r, in]``)
and ``…lora_B.weight`` (``[out, r]``). Everything is checked before anything
is kept: a rank above ``[lora] max_rank``, a target the model lacks, a tensor
whose shape does not fit its base layer, a missing or unreadable file each
raise :class:`LoraAdapterError` naming the adapter and the problem.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from tercet.errors import RequestError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# The projections an adapter may adapt, by PEFT's module names.
PART_NAMES = ("q", "k", "v", "o", "gate", "up", "down")
TENSOR_NAME = re.compile(r"(?:.*\.)?layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)_proj\.lora_([AB])(?:\.\w+)?\.weight")
# PEFT options that change what the tensors mean, and that tercet does not serve.
UNSERVED_OPTIONS = {"use_dora": "DoRA", "modules_to_save": "modules_to_save", "rank_pattern": "rank_pattern",
                    "alpha_pattern": "alpha_pattern", "layers_to_transform": "layers_to_transform"}


class LoraAdapterError(RequestError):
    """An adapter that cannot be served: nothing of it is loaded."""


@dataclass(frozen=True)
class PartShape:
    """A base projection part's input and output features."""

    in_features: int
    out_features: int


@dataclass(frozen=True)
class AdapterTensors:
    """A checked adapter: per ``(layer, part)``, its A ``[r, in]`` and its B ``[out, r]`` with the scale folded in."""

    name: str
    path: str
    rank: int
    tensors: Mapping[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def num_bytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.tensors.values())


def read_adapter(name: str, path: str, targets: Mapping[tuple[int, str], PartShape], max_rank: int,
                 dtype: torch.dtype) -> AdapterTensors:
    """The adapter in directory ``path``, checked against ``targets`` (the model's parts by ``(layer, part)``)."""
    where = f"LoRA adapter {name!r} ({path})"
    settings = _read_settings(Path(path), where)
    rank = _checked_rank(settings, max_rank, where)
    _check_targets(settings, {part for _, part in targets}, where)
    scale = _scale_of(settings, rank)
    pairs = _paired_tensors(_read_tensors(Path(path), where), where)
    tensors = {}
    for key, (lora_a, lora_b) in pairs.items():
        shape = targets.get(key)
        if shape is None:
            raise LoraAdapterError(f"{where}: the model has no {key[1]}_proj in layer {key[0]}", "lora")
        _check_shapes(lora_a, lora_b, shape, rank, f"{where}: layer {key[0]} {key[1]}_proj")
        tensors[key] = (lora_a.to(dtype), (lora_b.float() * scale).to(dtype))
    if not tensors:
        raise LoraAdapterError(f"{where}: {WEIGHTS_FILE} holds no LoRA weights", "lora")
    return AdapterTensors(name, str(path), rank, tensors)


def _read_settings(directory: Path, where: str) -> dict:
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise LoraAdapterError(f"{where}: no {CONFIG_FILE} there", "lora", 400)
    try:
        settings = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LoraAdapterError(f"{where}: {CONFIG_FILE} cannot be read: {error}", "lora") from None
    if not isinstance(settings, dict) or str(settings.get("peft_type", "LORA")).upper() != "LORA":
        raise LoraAdapterError(f"{where}: {CONFIG_FILE} is not a PEFT LoRA config", "lora")
    for option, shown in UNSERVED_OPTIONS.items():
        if settings.get(option):
            raise LoraAdapterError(f"{where}: {shown} is not supported", "lora")
    return settings


def _checked_rank(settings: dict, max_rank: int, where: str) -> int:
    rank = settings.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise LoraAdapterError(f"{where}: r must be a positive integer, got {rank!r}", "lora")
    if rank > max_rank:
        raise LoraAdapterError(f"{where}: its rank {rank} is above lora.max_rank = {max_rank}", "lora")
    return rank


def _check_targets(settings: dict, parts: set[str], where: str) -> None:
    targets = settings.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    lacking = sorted(str(target) for target in targets if str(target).removesuffix("_proj") not in parts)
    if lacking:
        served = ", ".join(f"{part}_proj" for part in PART_NAMES if part in parts)
        raise LoraAdapterError(f"{where}: target modules the model lacks: {', '.join(lacking)} (it has {served})",
                               "lora")


def _scale_of(settings: dict, rank: int) -> float:
    alpha = settings.get("lora_alpha", rank)
    return alpha / math.sqrt(rank) if settings.get("use_rslora") else alpha / rank


def _read_tensors(directory: Path, where: str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights_path = directory / WEIGHTS_FILE
    if not weights_path.is_file():
        raise LoraAdapterError(f"{where}: no {WEIGHTS_FILE} there", "lora")
    try:
        return load_file(str(weights_path))
    except (OSError, SafetensorError, ValueError, RuntimeError) as error:
        raise LoraAdapterError(f"{where}: {WEIGHTS_FILE} cannot be read: {error}", "lora") from None


def _paired_tensors(tensors: dict[str, torch.Tensor], where: str) -> dict[tuple[int, str], tuple]:
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for tensor_name, tensor in tensors.items():
        match = TENSOR_NAME.fullmatch(tensor_name)
        if match is None or match.group(2) not in PART_NAMES:
            raise LoraAdapterError(f"{where}: {tensor_name} is not a LoRA weight of a projection tercet adapts",
                                   "lora")
        halves.setdefault((int(match.group(1)), match.group(2)), {})[match.group(3)] = tensor
    missing = [f"layer {layer} {part}_proj" for (layer, part), pair in halves.items() if len(pair) != 2]
    if missing:
        raise LoraAdapterError(f"{where}: lora_A or lora_B missing for {', '.join(missing)}", "lora")
    return {key: (pair["A"], pair["B"]) for key, pair in halves.items()}


def _check_shapes(lora_a: torch.Tensor, lora_b: torch.Tensor, shape: PartShape, rank: int, where: str) -> None:
    expected_a, expected_b = (rank, shape.in_features), (shape.out_features, rank)
    if tuple(lora_a.shape) != expected_a or tuple(lora_b.shape) != expected_b:
        raise LoraAdapterError(
            f"{where}: lora_A is {list(lora_a.shape)} and lora_B {list(lora_b.shape)}, but the base layer "
            f"needs {list(expected_a)} and {list(expected_b)} (rank {rank}, {shape.in_features} in, "
            f"{shape.out_features} out)", "lora",
        )
