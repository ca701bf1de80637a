"""Where torch's weight-only kernels beat bfloat16: the decoder's linear layers at each batch size.

Times the default model's linear layers, as the linear methods make them
from its GGUF (q4_1 blocks, q8_0 LM head, int8 per channel) and dense in
bfloat16 (oneDNN-packed), called back to back for each batch size. Prints
one row per batch size and the crossover: the smallest batch at which dense
bfloat16 is faster. Run on an otherwise idle machine:

    python benchmarks/linear_kernels.py --batch-sizes 1 2 4 8 16 32
"""

from __future__ import annotations

import argparse
import time

import torch

from tercet.formats.checkpoint import open_checkpoint
from tercet.formats.default_model import find_default_gguf
from tercet.model.linear_method import LinearTarget
from tercet.model.weights import FUSED_PROJECTIONS
from tercet.plugins.linear_layers.methods import BlockLinearMethod, DenseLinearMethod, Int8LinearMethod


def layers_of_first_block(method_for, dtype: torch.dtype) -> list[torch.nn.Module]:
    """One decoder layer's four fused linear layers, made by ``method_for(weight)``."""
    parts: dict[str, list] = {}
    for name, tensor in open_checkpoint(find_default_gguf()).tensors():
        if not name.startswith("model.layers.0.") or not name.endswith(".weight") or len(tensor.shape) != 2:
            continue
        fused = next((f for fragment, (f, _) in FUSED_PROJECTIONS.items() if fragment in name), name)
        parts.setdefault(fused, []).append(tensor)
    target = LinearTarget("bench", dtype, torch.device("cpu"))
    layers = []
    for tensors in parts.values():
        from tercet.model.weights import _joined

        layers.append(method_for().create(_joined(tensors), None, target))
    return layers


def head(method_for, dtype: torch.dtype) -> torch.nn.Module:
    embedding = dict(open_checkpoint(find_default_gguf()).tensors())["model.embed_tokens.weight"]
    return method_for().create(embedding, None, LinearTarget("lm_head", dtype, torch.device("cpu")))


def milliseconds(layers, batch_size: int, repeats: int) -> float:
    inputs = [torch.randn(batch_size, layer.in_features).bfloat16() for layer in layers]
    for _ in range(3):
        for layer, x in zip(layers, inputs):
            layer(x)
    started = time.perf_counter()
    for _ in range(repeats):
        for layer, x in zip(layers, inputs):
            layer(x)
    return (time.perf_counter() - started) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=20)
    arguments = parser.parse_args()
    dtype = torch.bfloat16
    methods = {
        "q4_1": lambda: BlockLinearMethod("Q4_1"),
        "int8": Int8LinearMethod,
        "dense bf16": DenseLinearMethod,
    }
    decoder = {name: layers_of_first_block(method, dtype) for name, method in methods.items()}
    heads = {"q8_0": head(lambda: BlockLinearMethod("Q8_0"), dtype), "dense bf16": head(DenseLinearMethod, dtype)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; decoder times are one layer's x 30")
    print("| batch | " + " | ".join(f"decoder {name} (ms)" for name in decoder) + " | " + " | ".join(f"head {name} (ms)" for name in heads) + " |")
    print("|---" * (1 + len(decoder) + len(heads)) + "|")
    crossover = None
    for batch_size in arguments.batch_sizes:
        decoder_ms = {name: 30 * milliseconds(layers, batch_size, arguments.repeats) for name, layers in decoder.items()}
        head_ms = {name: milliseconds([layer], batch_size, arguments.repeats) for name, layer in heads.items()}
        print(f"| {batch_size} | " + " | ".join(f"{value:.1f}" for value in decoder_ms.values()) + " | "
              + " | ".join(f"{value:.2f}" for value in head_ms.values()) + " |", flush=True)
        if crossover is None and decoder_ms["dense bf16"] < decoder_ms["q4_1"]:
            crossover = batch_size
    print(f"crossover (dense bfloat16 faster than q4_1 from batch): {crossover}")


if __name__ == "__main__":
    main()
