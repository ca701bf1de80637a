"""The built-in LoRA backend: each segment's delta with torch matmuls, on any device.

A segment costs one matmul to shrink its rows through the stacked A of the
projection's parts, and one per part to expand them through its B, added in
place into the part's columns of the base output.
"""

from __future__ import annotations

from tercet.plugin_api import LoraBackend, hookimpl


class TorchLoraBackend(LoraBackend):
    # The one-call C runner computes the same products with the same bfloat16 roundings.
    native_equivalent = True

    def add_deltas(self, output, x, segments) -> None:
        for segment in segments:
            rows = slice(segment.start, segment.stop)
            weights = segment.weights
            shrunk = x[rows] @ weights.lora_a.t()
            for part in weights.parts:
                columns = slice(part.column, part.column + part.lora_b.shape[0])
                output[rows, columns] += shrunk[:, part.rank_start:part.rank_stop] @ part.lora_b.t()


@hookimpl
def register_lora_backends(register):
    register("torch", TorchLoraBackend)
