"""The decoder's linear layers at each batch size: the block kernel, torch's weight-only kernels, dense bfloat16.

Makes the default model's linear layers from its GGUF as the linear methods
do (q4_1 blocks, a q8_0 LM head) on tercet's block kernel
(plugins/linear_layers/block_matmul.c) and on torch's int4 kernel, and dense
in bfloat16 (oneDNN-packed), then calls all 30 decoder layers' four fused
projections back to back for each batch size, so the weights come from
memory as in a real step. On a CPU with AMX, the block kernel is also timed
held to VNNI's integer sums at every batch ("VNNI only"; by default it takes
AMX's from 48 rows, to the same bits). Prints one row per batch size (the best
of several trials: the machine may be shared) and the batch from which dense
bfloat16 beats each quantized path. Run on an otherwise idle machine:

    python benchmarks/linear_kernels.py --batch-sizes 1 2 4 8 16 32 64
"""

from __future__ import annotations

import argparse
import time

import torch

from tercet.formats.checkpoint import open_checkpoint
from tercet.formats.default_model import find_default_gguf
from tercet.model.linear_method import LinearTarget
from tercet.model.weights import FUSED_PROJECTIONS, _joined
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.plugins.linear_layers.methods import BlockLinearMethod, DenseLinearMethod


def decoder_layers(method, target: LinearTarget) -> list[torch.nn.Module]:
    """Every decoder layer's four fused linear layers, made by ``method``."""
    parts: dict[str, list] = {}
    for name, tensor in open_checkpoint(find_default_gguf()).tensors():
        if not name.startswith("model.layers.") or not name.endswith(".weight") or len(tensor.shape) != 2:
            continue
        fused = next((name.replace(f, fused) for f, (fused, _) in FUSED_PROJECTIONS.items() if f in name), name)
        parts.setdefault(fused, []).append(tensor)
    return [method.create(_joined(tensors), None, target) for tensors in parts.values()]


def head(method, target: LinearTarget) -> torch.nn.Module:
    embedding = dict(open_checkpoint(find_default_gguf()).tensors())["model.embed_tokens.weight"]
    return method.create(embedding, None, target)


def milliseconds(layers, batch_size: int, trials: int, dtype: torch.dtype = torch.bfloat16,
                 call=lambda layer, x: layer(x)) -> float:
    """The best of ``trials`` passes of ``call(layer, x)`` over every layer, ``x`` of ``batch_size`` rows."""
    inputs = [torch.randn(batch_size, layer.in_features).to(dtype) for layer in layers]
    for layer, x in zip(layers, inputs):
        call(layer, x)
    best = float("inf")
    for _ in range(trials):
        started = time.perf_counter()
        for layer, x in zip(layers, inputs):
            call(layer, x)
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def on_vnni(layer, x: torch.Tensor) -> torch.Tensor:
    """``layer`` (a block kernel layer) on ``x`` through VNNI's integer sums whatever the batch."""
    out = torch.empty(x.shape[0], layer.out_features, dtype=torch.bfloat16)
    load_block_matmul().tercet_block_matmul_on(x.data_ptr(), x.stride(0), x.shape[0], layer.in_features,
                                               layer.units_pointer, layer.kind_code, layer.out_features,
                                               out.data_ptr(), layer.out_features, 0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--trials", type=int, default=10)
    arguments = parser.parse_args()
    if load_block_matmul() is None:
        raise SystemExit("the block kernel does not run here (see the log line above)")

    def target(native_kernels: bool) -> LinearTarget:
        return LinearTarget("bench", torch.bfloat16, torch.device("cpu"), native_kernels=native_kernels)

    paths = {
        "block kernel": (BlockLinearMethod("Q4_1"), BlockLinearMethod("Q8_0"), target(True)),
        "torch int4": (BlockLinearMethod("Q4_1"), BlockLinearMethod("Q8_0"), target(False)),
        "dense bf16": (DenseLinearMethod(), DenseLinearMethod(), target(False)),
    }
    decoder = {name: decoder_layers(method, where) for name, (method, _, where) in paths.items()}
    heads = {name: head(method, where) for name, (_, method, where) in paths.items()}
    library = load_block_matmul()
    if library.tercet_block_matmul_amx():
        # The block kernel held to VNNI's integer sums at every batch (by default it takes AMX's from 48 rows).
        decoder["block kernel, VNNI only"] = decoder["block kernel"]
        heads["block kernel, VNNI only"] = heads["block kernel"]
    calls = {name: (on_vnni if name.endswith("VNNI only") else lambda layer, x: layer(x)) for name in decoder}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; best of {arguments.trials} trials")
    print("| batch | " + " | ".join(f"decoder {name} (ms)" for name in decoder) + " | "
          + " | ".join(f"head {name} (ms)" for name in heads) + " |")
    print("|---" * (1 + len(decoder) + len(heads)) + "|")
    dense_wins_from: dict[str, int | None] = {"block kernel": None, "torch int4": None}
    for batch_size in arguments.batch_sizes:
        decoder_ms = {name: milliseconds(layers, batch_size, arguments.trials, call=calls[name])
                      for name, layers in decoder.items()}
        head_ms = {name: milliseconds([layer], batch_size, arguments.trials, call=calls[name])
                   for name, layer in heads.items()}
        print(f"| {batch_size} | " + " | ".join(f"{value:.2f}" for value in decoder_ms.values()) + " | "
              + " | ".join(f"{value:.2f}" for value in head_ms.values()) + " |", flush=True)
        for name, wins_from in dense_wins_from.items():
            total = decoder_ms[name] + head_ms[name]
            if wins_from is None and decoder_ms["dense bf16"] + head_ms["dense bf16"] < total:
                dense_wins_from[name] = batch_size
    for name, wins_from in dense_wins_from.items():
        print(f"dense bfloat16 beats {name} (decoder + head) from batch: {wins_from or 'never, in these sizes'}")


if __name__ == "__main__":
    main()
