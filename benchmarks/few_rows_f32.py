"""float32 linear layers at 1 to 16 rows: the few-rows C kernel against torch's products.

Dequantizes the default model's decoder weights to float32 (the layers a
float32 target verifies drafts with under ``self_quantized``), then calls
all 30 layers' four fused projections back to back for each row count, so
the weights come from memory as in a real step, on three paths:

- ``kernel``: :file:`plugins/linear_layers/few_rows_f32.c`, what a float32
  layer runs at up to 16 rows where the CPU has AVX-512;
- ``W @ x.T``: the torch product the layer ran before the kernel;
- ``F.linear``: torch's own choice (a matrix-vector kernel at one row, a
  general product that packs the weights from two).

Prints the best of several trials per cell (the machine may be shared) and
the kernel's time as a ratio of the better torch path. Run on an otherwise
idle machine:

    python benchmarks/few_rows_f32.py [--rows 1 2 3 4 5 8 12 16] [--trials 5]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from tercet.model.linear_method import LinearTarget
from tercet.plugins.linear_layers import few_rows_f32
from tercet.plugins.linear_layers.methods import DenseLinearMethod

from linear_kernels import decoder_layers, milliseconds


def by_kernel(layer, x):
    return layer(x)


def by_transposed_product(layer, x):
    rows = torch.cat((x, x)) if x.shape[0] == 1 else x
    return torch.mm(layer.weight, rows.t()).t()[: x.shape[0]].contiguous()


def by_linear(layer, x):
    return F.linear(x, layer.weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 5, 8, 12, 16])
    parser.add_argument("--trials", type=int, default=5)
    arguments = parser.parse_args()
    if few_rows_f32.load_kernel() is None:
        raise SystemExit("the few-rows kernel does not run here (see the log line above)")
    target = LinearTarget("bench", torch.float32, torch.device("cpu"))
    layers = decoder_layers(DenseLinearMethod(), target)
    if not all(isinstance(layer, few_rows_f32.FewRowsLinear) for layer in layers):
        raise SystemExit("float32 layers are not FewRowsLinear here")
    megabytes = sum(layer.weight.numel() * 4 for layer in layers) / 2**20
    paths = {"kernel": by_kernel, "W @ x.T": by_transposed_product, "F.linear": by_linear}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {megabytes:.0f} MiB of float32 "
          f"decoder weights; best of {arguments.trials} trials")
    print("| rows | " + " | ".join(f"{name} (ms)" for name in paths) + " | kernel / better torch |")
    print("|---" * (len(paths) + 2) + "|")
    for rows in arguments.rows:
        times = {name: milliseconds(layers, rows, arguments.trials, torch.float32, path)
                 for name, path in paths.items()}
        torch_best = min(times["W @ x.T"], times["F.linear"])
        print(f"| {rows} | " + " | ".join(f"{value:.1f}" for value in times.values())
              + f" | {times['kernel'] / torch_best:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
