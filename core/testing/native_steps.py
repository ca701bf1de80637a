"""One step's hidden states through the model's one C call, or layer by layer, for tests comparing the two.

The step leaves the KV cache as it found it, so the same batch can run both
ways (and again); the step's LoRA adapters, if the batch has any, are served
as the model runner serves them.
"""

from __future__ import annotations

import torch


def rows_with_pages(runner, lengths: list[int], page_size: int) -> list[int]:
    """A request row of ``runner``'s slot table for each length, with pages enough for it."""
    rows = []
    for length in lengths:
        row = runner.req_to_token_pool.alloc()
        runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(-(-length // page_size)), page_size)
        rows.append(row)
    return rows


def hidden_and_cache(runner, batch, one_call: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The step's hidden states and the K/V buffers it wrote (a quantized cache's scales too, after them),
    run in one call or layer by layer."""
    model = runner.model
    saved = model.layer_runner  # a NativeLayers: the one call, and the runner it falls back on
    if not one_call:
        model.layer_runner = getattr(saved, "layer_by_layer", saved)
    buffers = runner.kv_cache.slot_tensors
    caches = [buffer.clone() for buffer in buffers]
    try:
        with torch.inference_mode():
            runner.attention_backend.prepare(batch, runner.req_to_token_pool.table)
            with runner.adapters_of(batch):
                hidden = model.hidden_states(batch).clone()
        written = [buffer.clone() for buffer in buffers]
    finally:
        model.layer_runner = saved
        for buffer, before in zip(buffers, caches):
            buffer.copy_(before)
    return hidden, written
