"""Load a Hugging Face Llama-family checkpoint directory into the lean model.

Checkpoint tensors are read one at a time (safetensors, sharded or not; else
``pytorch_model*.bin``) and copied into the model's parameters, with q/k/v
going into slices of the fused ``qkv_proj`` and gate/up into ``gate_up_proj``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from tercet.errors import ConfigError
from tercet.model.llama import LlamaForCausalLM

# checkpoint name fragment -> (fused parameter fragment, shard)
FUSED_PROJECTIONS = {
    ".self_attn.q_proj.": (".self_attn.qkv_proj.", "q"),
    ".self_attn.k_proj.": (".self_attn.qkv_proj.", "k"),
    ".self_attn.v_proj.": (".self_attn.qkv_proj.", "v"),
    ".mlp.gate_proj.": (".mlp.gate_up_proj.", "gate"),
    ".mlp.up_proj.": (".mlp.gate_up_proj.", "up"),
}

# Checkpoint tensors that the lean model recomputes rather than loads.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def load_weights(model: LlamaForCausalLM, model_dir: str | Path) -> None:
    """Fill every parameter of ``model`` from ``model_dir``; raise if any is missing."""
    parameters = dict(model.named_parameters(remove_duplicate=False))
    shard_rows = _shard_rows(model)
    unfilled = {name: set(shard_rows.get(name, {None})) for name in parameters}
    with torch.no_grad():
        for name, tensor in iter_checkpoint_tensors(Path(model_dir)):
            if name.endswith(IGNORED_SUFFIXES):
                continue
            target, shard = _target_of(name)
            if target not in parameters:
                if target == "lm_head.weight" and model.shape.tie_word_embeddings:
                    continue
                raise ConfigError(f"checkpoint tensor {name!r} has no place in the Llama model")
            parameter = parameters[target]
            destination = parameter if shard is None else parameter.narrow(0, *shard_rows[target][shard])
            if destination.shape != tensor.shape:
                raise ConfigError(
                    f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(destination.shape)}"
                )
            destination.copy_(tensor)
            unfilled[target].discard(shard)
    if model.shape.tie_word_embeddings:
        # Tied: the head is the embedding, filled under either name.
        filled_once = not unfilled["model.embed_tokens.weight"] or not unfilled["lm_head.weight"]
        if filled_once:
            unfilled["model.embed_tokens.weight"] = unfilled["lm_head.weight"] = set()
    missing = sorted(name for name, shards in unfilled.items() if shards)
    if missing:
        raise ConfigError(f"checkpoint {model_dir} lacks weights for: {', '.join(missing)}")


def _target_of(name: str) -> tuple[str, str | None]:
    for fragment, (fused_fragment, shard) in FUSED_PROJECTIONS.items():
        if fragment in name:
            return name.replace(fragment, fused_fragment), shard
    return name, None


def _shard_rows(model: LlamaForCausalLM) -> dict[str, dict[str, tuple[int, int]]]:
    """For each fused parameter, the (start, length) rows each checkpoint shard fills."""
    shape = model.shape
    q_rows = shape.num_heads * shape.head_dim
    kv_rows = shape.num_kv_heads * shape.head_dim
    qkv = {"q": (0, q_rows), "k": (q_rows, kv_rows), "v": (q_rows + kv_rows, kv_rows)}
    gate_up = {"gate": (0, shape.intermediate_size), "up": (shape.intermediate_size, shape.intermediate_size)}
    rows: dict[str, dict[str, tuple[int, int]]] = {}
    for name, _ in model.named_parameters():
        if ".qkv_proj." in name:
            rows[name] = qkv
        elif ".gate_up_proj." in name:
            rows[name] = gate_up
    return rows


def iter_checkpoint_tensors(model_dir: Path) -> Iterator[tuple[str, torch.Tensor]]:
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
