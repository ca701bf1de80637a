"""The model side of a scheduler: weights, KV memory and one forward per step.

The runner owns what a forward needs (the lean model, the paged KV cache, the
page allocator, the request → slot table and the attention backend); the
scheduler owns which requests run and which pages each holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from tercet.byte_size import format_byte_size, parse_byte_size
from tercet.config import DTYPE_NAMES, CacheConfig, ModelConfig
from tercet.errors import ConfigError
from tercet.formats.checkpoint import Checkpoint, open_checkpoint
from tercet.formats.pooling_spec import Pooling, resolve_pooling
from tercet.formats.weight_formats import BLOCK_FORMATS
from tercet.lora.lora_model import LoraModel
from tercet.model.architecture import ModelArchitecture, choose_architecture
from tercet.model.attention import AttentionLayout
from tercet.model.components import ModelComponents
from tercet.model.decode_graphs import CudaGraphCapturer, DecodeGraphs
from tercet.model.determinism import require_batch_invariant_layers
from tercet.model.forward_batch import ForwardBatch
from tercet.model.fused_ops import runner_steps_for
from tercet.model.kv_cache import PageAllocator, PagedKVCache, ReqToTokenPool, kv_bytes_per_token
from tercet.model.kv_dtypes import check_quantized_cache_runs, kv_dtype_name, resolve_kv_dtype
from tercet.model.layer_runner_choice import choose_layer_runner
from tercet.model.llama import LlamaForCausalLM, LlamaShape
from tercet.model.native_layers import load_layers_runner
from tercet.model.pooling import pool_hidden_states
from tercet.model.tensor_parallel import SINGLE, LlamaShards, TensorParallel
from tercet.model.weights import LinearMethodChoice, LoadReport
from tercet.native.cpu import best_level, is_forced, level_in_use, runnable_levels

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
logger = logging.getLogger(__name__)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} was asked for but CUDA is not available")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device, quantized: bool = False) -> torch.dtype:
    """``auto``: bfloat16 on CUDA, and on CPU when weights are quantized (torch's
    weight-only CPU kernels are many times slower with float32 activations);
    float32 otherwise, the precision that matches transformers token for token."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" or quantized else torch.float32
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ConfigError(f"model.dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}") from None


class ModelRunner:
    # A decoder generates; it embeds too when it has a pooling.
    can_generate = True

    def __init__(
        self, model: ModelConfig, cache: CacheConfig, components: ModelComponents, *,
        max_running_requests: int, tp: TensorParallel = SINGLE,
    ):
        self._open_decoder_checkpoint(model.path, components.architectures)
        self.quantization = model.quantization
        self.linear_methods = LinearMethodChoice.from_quantization(
            model.quantization, components.linear_methods, model.dense_from_rows, model.native_kernels
        )
        self.device = resolve_device(model.device)
        quantized = _runs_quantized(self.checkpoint, self.linear_methods)
        self.dtype = resolve_dtype(model.dtype, self.device, quantized=quantized)
        # What the KV pool stores ([cache] kv_dtype); refused here where a quantized cache cannot run.
        self.kv_dtype = resolve_kv_dtype(cache.kv_dtype, self.dtype)
        check_quantized_cache_runs(self.kv_dtype, self.device, tp.size)
        self.tp = tp
        self.graph_max_batch = min(model.cuda_graph_max_batch, max_running_requests)
        shape = self.architecture.shape(self.config)
        shards = LlamaShards.of(shape, tp)
        self._size_kv_pool(shape, shards, cache, model.kv_cache_memory)
        layout = AttentionLayout(shards.local_heads, shards.local_kv_heads, shape.head_dim, shape.num_layers,
                                 self.device, self.dtype, deterministic=model.deterministic,
                                 kv_dtype=self._layout_kv_dtype)
        with ThreadPoolExecutor(1, thread_name_prefix="tercet-kernels-ahead") as ahead:
            # A first start compiles the attention backend's and the layers' C kernels while the
            # weights load (the compiler runs in its own process), not one after the other.
            backend = ahead.submit(self._attention_backend_ahead, components.attention_backend, layout)
            self.model, self.load_report = self.load_model(self.checkpoint)
        self.vocab_size, self.embedding_size = shape.vocab_size, shape.hidden_size
        self._allocate_kv_memory(shape, shards, max_running_requests)
        if model.deterministic:
            require_batch_invariant_layers(self.model)
        model_layout = dataclasses.replace(self.model.attention_layout(), deterministic=model.deterministic,
                                           kv_dtype=self._layout_kv_dtype)
        self.attention_backend = (backend.result() if model_layout == layout
                                  else components.attention_backend(model_layout))
        self._attach(self.model)
        self.decode_graphs = self._decode_graphs()
        self.eos_token_ids = self.checkpoint.eos_token_ids()
        # How /v1/embeddings pools this decoder's final hidden states; None: it serves none.
        self.pooling = self._pooling_of(model.pooling)
        # The model's LoRA side, once attach_lora made it (None: it serves its own weights alone).
        self.lora: LoraModel | None = None

    def attach_lora(self, backend, max_rank: int) -> LoraModel:
        """Make the model serve LoRA adapters through ``backend`` (a :class:`tercet.lora.backend.LoraBackend`)."""
        self.lora = LoraModel(self.model, backend, max_rank)
        return self.lora

    @property
    def _layout_kv_dtype(self) -> torch.dtype | None:
        """The attention layout's ``kv_dtype``: None when the pool stores the activations' dtype."""
        return None if self.kv_dtype == self.dtype else self.kv_dtype

    def _attention_backend_ahead(self, create_backend, layout: AttentionLayout):
        """The attention backend for ``layout``, after loading the C steps the layers will call."""
        if runner_steps_for(self.device, self.dtype, self.linear_methods.native_kernels) is not None:
            load_layers_runner(self.dtype)
        return create_backend(layout)

    def _open_decoder_checkpoint(self, model_path: str | Path, architectures) -> None:
        """The checkpoint, and the decoder architecture its plugin registered, which builds and loads the model."""
        self.checkpoint = open_checkpoint(model_path)
        self.model_path, self.config = self.checkpoint.path, self.checkpoint.config
        self.architectures = architectures
        self.architecture = choose_architecture(self.config, architectures)
        if not isinstance(self.architecture, ModelArchitecture):
            raise ConfigError(f"{model_path} is an encoder-only model: it is run by tercet.model.encoder_runner")

    def _size_kv_pool(
        self, shape: LlamaShape, shards: LlamaShards, cache: CacheConfig, kv_cache_memory: str | int
    ) -> None:
        """Pages and tokens of the KV pool: ``cache.max_total_tokens``, or as many as the memory budget holds."""
        # With tensor parallelism a rank holds its own KV heads only: the budget is per rank, and
        # every rank sizes the pool by the largest share, so all have the same pages to schedule.
        local_shape = dataclasses.replace(shape, num_kv_heads=shards.most_kv_heads)
        self.page_size = cache.page_size
        max_total_tokens = cache.max_total_tokens
        if max_total_tokens is None:
            max_total_tokens = kv_tokens_for_budget(
                parse_byte_size(kv_cache_memory, "model.kv_cache_memory"), local_shape, self.kv_dtype, self.page_size
            )
        self.num_pages = math.ceil(max_total_tokens / self.page_size)
        self.max_total_tokens = self.num_pages * self.page_size
        # A request can never hold more tokens than the pool, nor more than
        # the model attends over; the slot table and rotary tables need no more.
        self.context_len = min(_max_context_of(self.config), self.max_total_tokens)

    def _allocate_kv_memory(self, shape: LlamaShape, shards: LlamaShards, max_running_requests: int) -> None:
        """The paged KV cache of this rank's KV heads, its page allocator and the request → slot table."""
        # With decode graphs, one more page than the allocator hands out: its first slot takes padding rows' K/V.
        scratch_pages = 1 if self.graph_max_batch else 0
        self.kv_cache = PagedKVCache(
            shape.num_layers, shards.local_kv_heads, shape.head_dim, self.num_pages + scratch_pages, self.page_size,
            self.kv_dtype, self.device,
        )
        self.page_allocator = PageAllocator(self.num_pages)
        self.req_to_token_pool = ReqToTokenPool(max_running_requests, self.context_len, self.device)

    def _pooling_of(self, pooling: str) -> Pooling | None:
        spec = resolve_pooling(self.model_path, pooling)
        if spec is not None and not hasattr(self.model, "final_hidden_states"):
            raise ConfigError(
                f"model.pooling: the {type(self.architecture).__name__} model gives no final hidden states to pool"
            )
        return spec

    def load_model(self, checkpoint: Checkpoint) -> tuple[LlamaForCausalLM, LoadReport]:
        model = self.architecture.create(checkpoint.config, self.dtype, self.device, self.context_len, self.tp)
        report = self.architecture.load_weights(model, checkpoint, self.linear_methods)
        model.eval().requires_grad_(False)
        return_freed_memory()
        return model, report

    def _attach(self, model) -> None:
        """Run ``model`` over this runner's attention backend and KV cache; a Llama-family decoder's layers
        on the runner chosen for it here, once (:mod:`tercet.model.layer_runner_choice` logs which and why).
        A CUDA graph, where one is captured, records a decode step of whichever runs."""
        if not isinstance(model, LlamaForCausalLM):  # another architecture runs its layers its own way
            model.attach(self.attention_backend, self.kv_cache)
            return
        layer_runner = choose_layer_runner(model, self.attention_backend, self.kv_cache,
                                           self.linear_methods.native_kernels)
        model.attach(self.attention_backend, self.kv_cache, layer_runner)

    @property
    def weights_info(self) -> dict:
        return describe_weights(self, self.kv_cache.num_bytes)

    def update_weights_from_disk(self, model_path: str | Path) -> None:
        """Serve the weights of another checkpoint of the same shape.

        The new weights load into a separate model first, so a bad path or an
        incompatible checkpoint raises and leaves the current weights serving."""
        checkpoint = open_checkpoint(model_path)
        if (choose_architecture(checkpoint.config, self.architectures).shape(checkpoint.config)
                != self.architecture.shape(self.config)):
            raise ConfigError(f"{model_path} has a different architecture than the model being served")
        model, report = self.load_model(checkpoint)
        self._attach(model)
        if self.lora is not None:
            self.lora.install(model)
        self.model, self.load_report = model, report
        self.decode_graphs = self._decode_graphs()  # the old graphs replay the old weights
        self.checkpoint, self.model_path, self.config = checkpoint, checkpoint.path, checkpoint.config

    def build_batch(
        self, req_pool_indices: list[int], prefix_lens: list[int], new_token_ids: list[list[int]],
        adapters: list[str | None] | None = None,
    ) -> ForwardBatch:
        """The step's batch; ``adapters`` names each sequence's LoRA adapter (None: the base model)."""
        batch = ForwardBatch.build(
            req_pool_indices, prefix_lens, new_token_ids, self.req_to_token_pool.table, self.device
        )
        if self.lora is None or not adapters or not any(adapters):
            return batch
        runs = self.lora.runs_of(adapters, [len(token_ids) for token_ids in new_token_ids])
        return dataclasses.replace(batch, lora_runs=runs)

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits ``[B, vocab]`` (float32) of each sequence's last new token."""
        with torch.inference_mode():
            # The graphs were captured without adapters: a step with any runs eagerly.
            if self.decode_graphs is not None and not batch.lora_runs:
                logits = self.decode_graphs.replay(batch)
                if logits is not None:
                    return logits
            return self.eager_forward(batch)

    def eager_forward(self, batch: ForwardBatch) -> torch.Tensor:
        self.attention_backend.prepare(batch, self.req_to_token_pool.table)
        with self.adapters_of(batch):
            return self.model(batch)

    def adapters_of(self, batch: ForwardBatch):
        """While the model runs ``batch``: its adapters' deltas added where its runs say."""
        return self.lora.serving(batch.lora_runs) if batch.lora_runs else contextlib.nullcontext()

    def _decode_graphs(self) -> DecodeGraphs | None:
        """The decode graphs ``model.cuda_graph_max_batch`` asks for, captured on CUDA (uncaptured
        elsewhere: every step then runs eagerly); None when it asks for none."""
        if not self.graph_max_batch:
            return None
        graphs = DecodeGraphs(self.eager_forward, self.graph_max_batch, self.num_pages * self.page_size,
                              self.context_len, self.device)
        if self.device.type != "cuda":
            logger.warning("model.cuda_graph_max_batch = %d does nothing on %s: CUDA graphs need CUDA",
                           self.graph_max_batch, self.device.type)
            return graphs
        if not self.attention_backend.supports_cuda_graphs:
            raise ConfigError(f"model.cuda_graph_max_batch needs an attention backend that supports CUDA graphs "
                              f"(triton); {type(self.attention_backend).__name__} does not")
        with torch.inference_mode():
            graphs.capture(CudaGraphCapturer())
        return graphs

    def embed(self, sequences: list[list[int]], rows: list[int]) -> torch.Tensor:
        """Pooled final hidden states ``[B, hidden]`` (float32) of whole sequences, run once
        from position 0 in the req-to-token ``rows`` (whose slots the caller lent them)."""
        batch = self.build_batch(rows, [0] * len(sequences), sequences)
        with torch.inference_mode():
            self.attention_backend.prepare(batch, self.req_to_token_pool.table)
            hidden = self.model.final_hidden_states(batch)
            return pool_hidden_states(hidden, [len(sequence) for sequence in sequences], self.pooling)

    def forward_with_prompt_logits(
        self, batch: ForwardBatch, sequence_indices: list[int]
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """``forward``'s logits, plus float32 logits ``[extend_len_i, vocab]`` of every new
        token of the sequences at ``sequence_indices`` (positions in the batch)."""
        with torch.inference_mode():
            self.attention_backend.prepare(batch, self.req_to_token_pool.table)
            with self.adapters_of(batch):
                return self.model.forward_with_prompt_logits(batch, sequence_indices)


def _max_context_of(config) -> int:
    context = config.max_position_embeddings
    sliding_window = getattr(config, "sliding_window", None)
    if sliding_window and getattr(config, "use_sliding_window", True):
        # Full attention equals sliding-window attention while the context fits the window.
        context = min(context, sliding_window)
    return context


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc only; elsewhere a no-op).

    Loading converts every tensor through short-lived copies; glibc keeps the
    freed space in its heap, where it counts in the process's memory (about
    140 MiB for the default model) though nothing uses it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def kv_tokens_for_budget(budget_bytes: int, shape: LlamaShape, dtype: torch.dtype, page_size: int) -> int:
    """The most tokens (whole pages) whose K and V (in a ``dtype`` cache, scales included) fit in ``budget_bytes``."""
    bytes_per_token = kv_bytes_per_token(shape.num_layers, shape.num_kv_heads, shape.head_dim, dtype)
    pages = budget_bytes // (bytes_per_token * page_size)
    if pages < 1:
        raise ConfigError(
            f"model.kv_cache_memory = {format_byte_size(budget_bytes)} holds no page of KV cache: one page of "
            f"{page_size} tokens takes {format_byte_size(bytes_per_token * page_size)} with this model's K/V in "
            f"{kv_dtype_name(dtype)}"
        )
    return pages * page_size


def _runs_quantized(checkpoint: Checkpoint, choice: LinearMethodChoice) -> bool:
    if choice.fixed is not None:
        return choice.fixed != "dense"
    return any(name in BLOCK_FORMATS for name in checkpoint.tensor_formats)


def describe_weights(runner, kv_cache_bytes: int) -> dict:
    """What ``/get_server_info`` reports about the weights ``runner`` (a model or encoder runner) serves."""
    return {
        "quantization": runner.quantization,
        "weight_format": runner.load_report.weight_format,
        "layers_by_method": dict(runner.load_report.layers_by_method),
        "checkpoint_formats": dict(runner.checkpoint.tensor_formats),
        "weight_bytes": runner.load_report.weight_bytes,
        "dtype": str(runner.dtype).removeprefix("torch."),
        "kv_cache_bytes": kv_cache_bytes,
        # What the pool stores ([cache] kv_dtype resolved; None: no pool) and how many tokens it holds.
        "kv_dtype": None if runner.kv_cache is None else kv_dtype_name(runner.kv_cache.dtype),
        "max_total_tokens": runner.max_total_tokens,
        "pooling": None if runner.pooling is None else runner.pooling.as_dict(),
        "cpu_isa": describe_cpu_isa() if runner.device.type == "cpu" else None,
    }


def describe_cpu_isa() -> dict:
    """The instruction-set level this process's C kernels run at, and why (``model.cpu_isa``)."""
    level = level_in_use()
    return {"level": level.name, "summary": level.summary, "forced": is_forced(), "cpu_best": best_level().name,
            "cpu_runs": [runnable.name for runnable in runnable_levels()]}
