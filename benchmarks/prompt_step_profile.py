"""Where a prompt step goes: one prefill of N tokens on the default model, split into attention, matmuls and the rest.

Drives the default model through tercet's scheduler in process (as ``tercet
bench offline`` does) and times the step that prefills one prompt of N tokens
(best of the repeats, each a fresh prompt, so no prefix is cached). Then, on the
same shapes, it times the parts alone:

- attention: the model's attention backend over the step's rows, every layer
  (the prompt's K/V written, each row attending to the keys before it);
- matmuls: every layer's linear layers (QKV, output, gate-up, down) on N rows;
- the rest: the step's time less those two (norms, rotary, SiLU, embedding, the
  LM head's one row, sampling, the scheduler's own work).

Run it on an otherwise idle machine; figures vary between runs by several per
cent, so compare two builds in one sitting:

    python benchmarks/prompt_step_profile.py --tokens 512 2048
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from tercet.bench.offline_tercet import CollectingSender, TercetOfflineEngine
from tercet.formats.default_model import find_default_gguf
from tercet.ipc.messages import TokenizedGenerateReq
from tercet.model.kv_cache import PagedKVCache
from tercet.plugin_api.model import ForwardBatch
from tercet.sampling_params import SamplingParams


def _engine(max_tokens: int) -> TercetOfflineEngine:
    engine = TercetOfflineEngine(find_default_gguf(), "auto", "cpu", 1, max_tokens + 16)
    engine.scheduler.sender_to_detokenizer = CollectingSender(lambda message, now: None)
    return engine


def _best_ms(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def prefill_step_ms(engine: TercetOfflineEngine, tokens: int, repeats: int, seed: int) -> float:
    """The step that prefills a fresh prompt of ``tokens`` tokens (one new token asked for)."""
    scheduler, generator = engine.scheduler, random.Random(seed)
    params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    times = []
    for attempt in range(repeats + 1):  # the first warms
        prompt = [generator.randrange(100, 40000) for _ in range(tokens)]
        scheduler.io.dispatcher(TokenizedGenerateReq(f"prompt-{tokens}-{attempt}", prompt, params))
        started = time.perf_counter()
        while scheduler.queues.waiting or scheduler.queues.running:
            scheduler.run_step()
        times.append(time.perf_counter() - started)
    return min(times[1:]) * 1e3


def attention_ms(engine: TercetOfflineEngine, tokens: int, repeats: int) -> float:
    runner = engine.model_runner
    backend, layout = runner.attention_backend, runner.model.attention_layout()
    page_size = 16
    num_pages = (tokens + page_size - 1) // page_size + 1
    cache = PagedKVCache(layout.num_layers, layout.num_kv_heads, layout.head_dim, num_pages, page_size,
                         runner.kv_cache.dtype, "cpu")
    table = (torch.randperm(num_pages).view(1, -1, 1) * page_size + torch.arange(page_size)).view(1, -1)
    batch = ForwardBatch.build([0], [0], [[7] * tokens], table, "cpu")
    fused = torch.randn(tokens, layout.num_heads + 2 * layout.num_kv_heads, layout.head_dim).to(layout.dtype)
    q, k, v = fused.split([layout.num_heads, layout.num_kv_heads, layout.num_kv_heads], dim=1)

    def every_layer():
        backend.prepare(batch, table)
        for layer in range(layout.num_layers):
            backend.forward(q, k, v, layer, batch, cache)

    with torch.inference_mode():
        every_layer()
        return _best_ms(every_layer, repeats)


def matmuls_ms(engine: TercetOfflineEngine, tokens: int, repeats: int) -> float:
    model = engine.model_runner.model
    linears = [linear for layer in model.model.layers
               for linear in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj,
                              layer.mlp.down_proj)]
    inputs = {linear.in_features: torch.randn(tokens, linear.in_features).to(model.dtype) for linear in linears}

    def every_linear():
        for linear in linears:
            linear(inputs[linear.in_features])

    with torch.inference_mode():
        every_linear()
        return _best_ms(every_linear, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    engine = _engine(max(arguments.tokens))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"attention backend {type(engine.model_runner.attention_backend).__name__}")
    print("tokens  step ms  attention ms  matmuls ms  rest ms  prompt tok/s")
    for tokens in arguments.tokens:
        step = prefill_step_ms(engine, tokens, arguments.repeats, seed=tokens)
        attention = attention_ms(engine, tokens, arguments.repeats)
        matmuls = matmuls_ms(engine, tokens, arguments.repeats)
        print(f"{tokens:6d}  {step:7.0f}  {attention:12.0f}  {matmuls:10.0f}  {step - attention - matmuls:7.0f}"
              f"  {tokens / step * 1e3:12.0f}")
    engine.close()


if __name__ == "__main__":
    main()
