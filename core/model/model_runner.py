"""The model side of a scheduler: weights, KV memory and one forward per step.

The runner owns what a forward needs (the lean model, the paged KV cache, the
page allocator, the request → slot table and the attention backend); the
scheduler owns which requests run and which pages each holds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch

from tercet.config import DTYPE_NAMES, CacheConfig, ModelConfig, SchedulerConfig
from tercet.errors import ConfigError
from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PageAllocator, PagedKVCache, ReqToTokenPool
from tercet.model.llama import LlamaForCausalLM, LlamaShape
from tercet.model.cpu_packed_linear import can_pack, pack_linear_layers
from tercet.model.weights import load_weights

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
# The runner's defaults are the configuration's: the limits are written once, in core/config.py.
_CACHE, _SCHEDULER, _MODEL = CacheConfig(), SchedulerConfig(), ModelConfig()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} was asked for but CUDA is not available")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ConfigError(f"model.dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}") from None


class ModelRunner:
    def __init__(
        self,
        model_path: str | Path,
        dtype: str = _MODEL.dtype,
        device: str = _MODEL.device,
        attention_backend_factory: Callable[[AttentionLayout], AttentionBackend] | None = None,
        max_total_tokens: int = _CACHE.max_total_tokens,
        page_size: int = _CACHE.page_size,
        max_running_requests: int = _SCHEDULER.max_running_requests,
    ):
        from transformers import AutoConfig

        if attention_backend_factory is None:
            raise ConfigError("ModelRunner needs an attention backend factory (see [attention] backend)")
        self.model_path = Path(model_path)
        self.config = AutoConfig.from_pretrained(str(self.model_path))
        model_type = getattr(self.config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"model type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.page_size = page_size
        self.num_pages = math.ceil(max_total_tokens / page_size)
        self.max_total_tokens = self.num_pages * page_size
        # A request can never hold more tokens than the pool, nor more than
        # the model attends over; the slot table and rotary tables need no more.
        self.context_len = min(_max_context_of(self.config), self.max_total_tokens)

        self.model = self.load_model(self.config, self.model_path)
        shape = self.model.shape
        self.vocab_size = shape.vocab_size

        self.kv_cache = PagedKVCache(
            shape.num_layers, shape.num_kv_heads, shape.head_dim, self.num_pages, page_size, self.dtype, self.device
        )
        self.page_allocator = PageAllocator(self.num_pages)
        self.req_to_token_pool = ReqToTokenPool(max_running_requests, self.context_len, self.device)
        self.attention_backend = attention_backend_factory(shape.attention_layout(self.device, self.dtype))
        self.model.attach(self.attention_backend, self.kv_cache)
        self.eos_token_ids = _eos_token_ids(self.config, self.model_path)

    def load_model(self, config, model_path: Path) -> LlamaForCausalLM:
        model = LlamaForCausalLM(config, self.dtype, self.device, max_positions=self.context_len)
        load_weights(model, model_path)
        model.eval().requires_grad_(False)
        if can_pack(self.device, self.dtype):
            pack_linear_layers(model)
        return model

    def update_weights_from_disk(self, model_path: str | Path) -> None:
        """Serve the weights of another checkpoint of the same shape.

        The new weights load into a separate model first, so a bad path or an
        incompatible checkpoint raises and leaves the current weights serving."""
        from transformers import AutoConfig

        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError(f"{model_path} is not a checkpoint directory (no config.json)")
        config = AutoConfig.from_pretrained(str(model_path))
        if LlamaShape.from_config(config) != self.model.shape:
            raise ConfigError(f"{model_path} has a different architecture than the model being served")
        model = self.load_model(config, model_path)
        model.attach(self.attention_backend, self.kv_cache)
        self.model, self.model_path, self.config = model, model_path, config

    def build_batch(
        self, req_pool_indices: list[int], prefix_lens: list[int], new_token_ids: list[list[int]]
    ) -> ForwardBatch:
        return ForwardBatch.build(
            req_pool_indices, prefix_lens, new_token_ids, self.req_to_token_pool.table, self.device
        )

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits ``[B, vocab]`` (float32) of each sequence's last new token."""
        with torch.inference_mode():
            self.attention_backend.prepare(batch, self.req_to_token_pool.table)
            return self.model(batch)

    def forward_with_prompt_logits(
        self, batch: ForwardBatch, sequence_indices: list[int]
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """``forward``'s logits, plus float32 logits ``[extend_len_i, vocab]`` of every new
        token of the sequences at ``sequence_indices`` (positions in the batch)."""
        with torch.inference_mode():
            self.attention_backend.prepare(batch, self.req_to_token_pool.table)
            return self.model.forward_with_prompt_logits(batch, sequence_indices)


def _max_context_of(config) -> int:
    context = config.max_position_embeddings
    sliding_window = getattr(config, "sliding_window", None)
    if sliding_window and getattr(config, "use_sliding_window", True):
        # Full attention equals sliding-window attention while the context fits the window.
        context = min(context, sliding_window)
    return context


def _eos_token_ids(config, model_path: Path) -> set[int]:
    eos_token_ids = _as_id_set(getattr(config, "eos_token_id", None))
    generation_config = model_path / "generation_config.json"
    if generation_config.is_file():
        eos_token_ids |= _as_id_set(json.loads(generation_config.read_text()).get("eos_token_id"))
    return eos_token_ids


def _as_id_set(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(token_id) for token_id in value}
