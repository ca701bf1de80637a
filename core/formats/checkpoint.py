"""A checkpoint to load: a Hugging Face directory or a GGUF file, seen the same way.

Both give a transformers config and their tensors under Hugging Face names,
one at a time, so loading never holds more than a layer's worth of copies.
A Hugging Face checkpoint's tensors are dense; a GGUF's quantized tensors
stay in their blocks (:class:`tercet.formats.gguf_blocks.BlockQuantized`),
with the q/k row order the GGUF converter changed for its rotary put back.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from tercet.errors import ConfigError
from tercet.formats.weight_formats import checkpoint_formats, gguf_formats

GGUF_SUFFIX = ".gguf"


def is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == GGUF_SUFFIX


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    config: object  # a transformers PretrainedConfig
    # The tensor formats as shipped, with how many tensors each: {"Q4_1": 210, "F32": 61, "Q8_0": 1}.
    tensor_formats: dict[str, int]

    @property
    def is_gguf(self) -> bool:
        return is_gguf(self.path)

    def tensors(self) -> Iterator[tuple[str, object]]:
        """(Hugging Face name, dense tensor or BlockQuantized) for every tensor."""
        if self.is_gguf:
            yield from _gguf_tensors(self.path, self.config)
        else:
            yield from _hf_tensors(self.path)

    def eos_token_ids(self) -> set[int]:
        eos_token_ids = _as_id_set(getattr(self.config, "eos_token_id", None))
        generation_config = self.path / "generation_config.json"
        if not self.is_gguf and generation_config.is_file():
            eos_token_ids |= _as_id_set(json.loads(generation_config.read_text()).get("eos_token_id"))
        return eos_token_ids


def open_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at ``path``; a ConfigError naming the problem when there is none."""
    path = Path(path)
    if is_gguf(path):
        if not path.is_file():
            raise ConfigError(f"GGUF file {str(path)!r} does not exist")
        status = path.stat()
        return _open_gguf_checkpoint(path, status.st_mtime_ns, status.st_size)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a checkpoint directory (no config.json) nor a .gguf file")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path))
    return Checkpoint(path, config, checkpoint_formats(path))


@functools.lru_cache(maxsize=4)
def _open_gguf_checkpoint(path: Path, mtime_ns: int, size: int) -> Checkpoint:
    """Read once per process and version of the file: a scheduler's start asks three times (which
    architecture, the runner, the weights' formats), and each read parses the whole vocabulary."""
    from tercet.formats.gguf_file import GgufFile
    from tercet.formats.gguf_llama import config_from_gguf

    with GgufFile(path) as gguf:
        _check_tensor_types(gguf)
        return Checkpoint(path, config_from_gguf(gguf), gguf_formats(gguf))


def _check_tensor_types(gguf) -> None:
    """Refuse a GGUF with a tensor type no method reads, before any tensor is loaded."""
    from tercet.formats.gguf_blocks import SUPPORTED_TENSOR_TYPES
    from tercet.formats.gguf_file import GgufError

    unsupported = {tensor.type_name for tensor in gguf.tensors.values()} - set(SUPPORTED_TENSOR_TYPES)
    if unsupported:
        examples = [name for name, tensor in gguf.tensors.items() if tensor.type_name in unsupported][:3]
        raise GgufError(
            f"{gguf.path}: tensors of type {', '.join(sorted(unsupported))} (for example {', '.join(examples)}) "
            f"cannot be served; supported tensor types: {', '.join(SUPPORTED_TENSOR_TYPES)}"
        )


def _gguf_tensors(path: Path, config) -> Iterator[tuple[str, object]]:
    from tercet.formats.gguf_blocks import BlockQuantized, read_tensor
    from tercet.formats.gguf_file import GgufFile
    from tercet.formats.gguf_llama import hf_name_of, unpermute_rows

    heads_of = {".self_attn.q_proj.": config.num_attention_heads, ".self_attn.k_proj.": config.num_key_value_heads}
    with GgufFile(path) as gguf:
        for gguf_name in gguf.tensors:
            name = hf_name_of(gguf_name)
            if name is None:
                continue  # tensors the model recomputes (rope_freqs)
            tensor = read_tensor(gguf, gguf_name)
            for fragment, num_heads in heads_of.items():
                if fragment in name and name.endswith(".weight"):
                    order = unpermute_rows(tensor.shape[0], num_heads)
                    tensor = tensor.rows(order) if isinstance(tensor, BlockQuantized) else tensor[order]
            yield name, tensor


def _hf_tensors(model_dir: Path) -> Iterator[tuple[str, torch.Tensor]]:
    safetensors_files = sorted(model_dir.glob("*.safetensors"))
    if safetensors_files:
        from safetensors import safe_open

        for path in safetensors_files:
            with safe_open(str(path), framework="pt") as checkpoint:
                for name in checkpoint.keys():
                    yield name, checkpoint.get_tensor(name)
        return
    bin_files = sorted(model_dir.glob("pytorch_model*.bin"))
    if not bin_files:
        raise ConfigError(f"{model_dir} has no *.safetensors or pytorch_model*.bin weights")
    for path in bin_files:
        state_dict = torch.load(path, map_location="cpu", weights_only=True)
        yield from state_dict.items()
        del state_dict


def _as_id_set(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(token_id) for token_id in value}
