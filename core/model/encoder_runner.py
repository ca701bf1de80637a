"""The model side of a scheduler serving an encoder-only model (BERT): embeddings, nothing else.

An encoder has no KV cache: each batch of whole sequences runs once and is
forgotten. The runner still offers the KV attributes the scheduler's
generation machinery reads (:class:`tercet.scheduler.kv_memory.RequestKVMemory`),
as an empty pool: no page and no row, so that machinery never admits
anything, and generation requests are refused before they reach it anyway.
That keeps one scheduler, one control plane and one set of figures for
every model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tercet.config import ModelConfig
from tercet.errors import ConfigError
from tercet.formats.checkpoint import open_checkpoint
from tercet.formats.pooling_spec import resolve_pooling
from tercet.model.architecture import EncoderArchitecture, choose_architecture
from tercet.model.components import ModelComponents
from tercet.model.kv_cache import PageAllocator, ReqToTokenPool
from tercet.model.model_runner import describe_weights, resolve_device, resolve_dtype, return_freed_memory
from tercet.model.pooling import pool_hidden_states
from tercet.model.tensor_parallel import SINGLE, TensorParallel

# Quantization values that mean "dense", which is all the encoder runs.
DENSE_QUANTIZATIONS = ("auto", "none", "dense")


class EncoderRunner:
    can_generate = False

    def __init__(self, model: ModelConfig, components: ModelComponents, *, tp: TensorParallel = SINGLE):
        if tp.enabled:
            raise ConfigError(
                "parallel.tp_size > 1: tensor parallelism splits decoders only; serve an encoder with tp_size = 1"
            )
        if model.quantization not in DENSE_QUANTIZATIONS:
            raise ConfigError(
                f"model.quantization {model.quantization!r}: an encoder-only model runs dense weights only"
            )
        self._open_encoder_checkpoint(model.path, components.architectures)
        self.pooling = resolve_pooling(self.model_path, model.pooling)
        if self.pooling is None:
            raise ConfigError(
                f"{model.path} is an encoder-only model, which only embeds, and has no pooling: it has no "
                "sentence-transformers modules.json; set model.pooling to mean, cls or last"
            )
        self.quantization = model.quantization
        self.tp = tp
        self.device = resolve_device(model.device)
        self.dtype = resolve_dtype(model.dtype, self.device)
        self.model, self.load_report = self.load_model(self.checkpoint)
        self.context_len = self.model.max_positions
        self.vocab_size = self.config.vocab_size
        self.embedding_size = self.model.hidden_size
        self.eos_token_ids: set[int] = set()
        # The empty KV pool (see the module's docstring).
        self.page_size = 1
        self.num_pages = self.max_total_tokens = 0
        self.page_allocator = PageAllocator(0)
        self.req_to_token_pool = ReqToTokenPool(0, 1, self.device)
        self.kv_cache = None

    def _open_encoder_checkpoint(self, model_path: str | Path, architectures) -> None:
        """The checkpoint directory, and the encoder architecture its plugin registered."""
        self.checkpoint = open_checkpoint(model_path)
        if self.checkpoint.is_gguf:
            raise ConfigError(f"{model_path}: encoder-only models are served from checkpoint directories, not GGUF")
        self.model_path, self.config = self.checkpoint.path, self.checkpoint.config
        self.architectures = architectures
        self.architecture = choose_architecture(self.config, architectures)
        if not isinstance(self.architecture, EncoderArchitecture):
            raise ConfigError(f"{model_path} is not an encoder-only model")

    def load_model(self, checkpoint):
        model = self.architecture.create(checkpoint.config, self.dtype, self.device)
        report = self.architecture.load_weights(model, checkpoint)
        model.eval().requires_grad_(False)
        return_freed_memory()
        return model, report

    @property
    def weights_info(self) -> dict:
        return describe_weights(self, kv_cache_bytes=0)

    def update_weights_from_disk(self, model_path: str | Path) -> None:
        """Serve the weights of another checkpoint of the same architecture and sizes;
        a bad one raises and leaves the current weights serving."""
        checkpoint = open_checkpoint(model_path)
        architecture = choose_architecture(checkpoint.config, self.architectures)
        model, report = self.load_model(checkpoint)
        if type(architecture) is not type(self.architecture) or (
            (model.hidden_size, model.max_positions) != (self.embedding_size, self.context_len)
        ):
            raise ConfigError(f"{model_path} has a different architecture than the model being served")
        self.model, self.load_report = model, report
        self.checkpoint, self.model_path, self.config = checkpoint, checkpoint.path, checkpoint.config

    def embed(self, sequences: list[list[int]], rows: list[int] | None = None) -> torch.Tensor:
        """Pooled final hidden states ``[B, hidden]`` (float32) of whole sequences (no KV rows needed)."""
        seq_lens = [len(sequence) for sequence in sequences]
        input_ids = torch.tensor([token for sequence in sequences for token in sequence], dtype=torch.int64)
        with torch.inference_mode():
            hidden = self.model(input_ids.to(self.device), seq_lens)
            return pool_hidden_states(hidden, seq_lens, self.pooling)
