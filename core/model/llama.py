"""A lean Llama-family decoder that runs over the paged KV cache.

Projections are fused (q/k/v into one matmul, gate/up into another) and every
layer sees the whole batch's tokens flattened to ``[T, hidden]``: no padding,
no per-sequence loop. Attention goes through the configured backend plugin,
which reads and writes the paged cache. Only the last new token of each
sequence reaches the LM head, since that is all a step samples from (and,
for requests asking for prompt log-probabilities, their prompt tokens).

Built with a :class:`tercet.model.tensor_parallel.TensorParallel` of more
than one rank, each layer holds its rank's shard (see that module) and the
forward joins the ranks with an all-reduce after the o and down projections
and the embedding, and an all-gather of the logits.

The layer is written three times. This file is its torch form, what
:class:`tercet.model.torch_layers.TorchLayers` runs; the layer runner chosen
when the model is attached (:mod:`tercet.model.layer_runner`) may run another:

- :class:`tercet.model.fused_layers.FusedCpuLayers` (``core/model/fused_layers.py``):
  the same layer from Python, its norms with their residual add, SiLU·mul and
  rotary as C calls (``core/model/cpu_fused_ops.c``);
- :class:`tercet.model.native_layers.NativeLayers` (``core/model/native_layers.c``):
  every layer in one C call, the fused form's functions in its order.

A change to the layer (a norm, a bias, the order of the residual adds) is made
in all three. What holds them equal: ``tests/model/test_native_layers.py`` (the
one call against the fused form, bit for bit in bfloat16),
``tests/model/test_fused_ops.py`` (each fused step against the torch op it
replaces) and ``tests/model/test_llama_matches_transformers.py`` (the torch form's
greedy output against transformers').
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import PagedKVCache
from tercet.model.layer_runner import LayerRunner
from tercet.model.rotary import RopeSettings, RotaryEmbedding, apply_rotary
from tercet.model.tensor_parallel import SINGLE, LlamaShards, TensorParallel
from tercet.model.torch_layers import TorchLayers


@dataclass(frozen=True)
class LlamaShape:
    """The sizes a Llama-family config fixes, read once from a transformers config."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool

    @classmethod
    def from_config(cls, config) -> LlamaShape:
        num_heads = config.num_attention_heads
        attention_bias = bool(getattr(config, "attention_bias", False))
        # Qwen2 has biases on q/k/v only and no attention_bias key.
        is_qwen2 = getattr(config, "model_type", "") == "qwen2"
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=num_heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or num_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // num_heads,
            rms_norm_eps=config.rms_norm_eps,
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=attention_bias or is_qwen2,
            o_bias=attention_bias,
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
        )


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self.normalized_shape = (hidden_size,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 whatever the model dtype, as the reference does.
        # torch.rms_norm is the reference's arithmetic (mean of squares, rsqrt,
        # scale) in fewer dispatched ops; the weight is applied after the cast
        # back, as the reference does, so the results are equal bit for bit.
        return self.weight * torch.rms_norm(x.float(), self.normalized_shape, eps=self.eps).to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, shape: LlamaShape, layer_id: int, shards: LlamaShards):
        super().__init__()
        self.layer_id = layer_id
        self.tp = shards.tp
        # This rank's heads: all of them without tensor parallelism.
        self.num_heads = shards.local_heads
        self.num_kv_heads = shards.local_kv_heads
        self.head_dim = shape.head_dim
        self.q_size = self.num_heads * shape.head_dim
        self.kv_size = self.num_kv_heads * shape.head_dim
        # q and k sit side by side in the fused projection: they are rotated in one pass.
        self.rotated_heads = self.num_heads + self.num_kv_heads
        self.qkv_proj = nn.Linear(shape.hidden_size, self.q_size + 2 * self.kv_size, bias=shape.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, shape.hidden_size, bias=shape.o_bias)

    def forward(self, hidden, cos, signed_sin, batch: ForwardBatch, backend: AttentionBackend, kv_cache: PagedKVCache):
        qkv = self.qkv_proj(hidden)
        q, k = self.split_qk(apply_rotary(self.qk_heads(qkv), cos, signed_sin))
        return self.attend(q, k, qkv, batch, backend, kv_cache)

    def qk_heads(self, qkv: torch.Tensor) -> torch.Tensor:
        """The q and k heads of the fused projection's output, ``[T, rotated_heads, head_dim]`` (a view)."""
        return qkv[:, : self.q_size + self.kv_size].view(-1, self.rotated_heads, self.head_dim)

    def split_qk(self, qk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return qk.split([self.num_heads, self.num_kv_heads], dim=1)

    def attend(self, q, k, qkv, batch: ForwardBatch, backend: AttentionBackend, kv_cache: PagedKVCache):
        """Attention of the rotated ``q`` and ``k`` with ``qkv``'s v, through the o projection."""
        v = qkv[:, self.q_size + self.kv_size :].view(-1, self.num_kv_heads, self.head_dim)
        return self.tp.all_reduce(self.o_proj(backend.forward(q, k, v, self.layer_id, batch, kv_cache)))


class LlamaMLP(nn.Module):
    def __init__(self, shape: LlamaShape, shards: LlamaShards):
        super().__init__()
        self.tp = shards.tp
        intermediate = shards.local_intermediate
        self.gate_up_proj = nn.Linear(shape.hidden_size, 2 * intermediate, bias=shape.mlp_bias)
        self.down_proj = nn.Linear(intermediate, shape.hidden_size, bias=shape.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.tp.all_reduce(self.down_proj(F.silu(gate) * up))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, shape: LlamaShape, layer_id: int, shards: LlamaShards):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = LlamaAttention(shape, layer_id, shards)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = LlamaMLP(shape, shards)

    def forward(self, hidden, cos, signed_sin, batch, backend, kv_cache):
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, signed_sin, batch, backend, kv_cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaModel(nn.Module):
    def __init__(self, shape: LlamaShape, shards: LlamaShards):
        super().__init__()
        # Given an empty table: the checkpoint fills it, and initialising it at random on the
        # meta device (normal_) would import torch's Python reference ops, a second at every start.
        self.embed_tokens = nn.Embedding(
            shards.local_vocab, shape.hidden_size, _weight=torch.empty(shards.local_vocab, shape.hidden_size)
        )
        self.layers = nn.ModuleList(LlamaDecoderLayer(shape, i, shards) for i in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)


def _allocate_on(module: nn.Module, device: torch.device) -> None:
    """``module.to_empty(device, recurse=False)``, without its cost: ``to_empty`` goes through
    ``empty_like`` of meta tensors, whose first call imports torch's Python reference ops
    (about half a second of every start)."""
    for name, param in list(module.named_parameters(recurse=False)):
        empty = torch.empty(param.shape, dtype=param.dtype, device=device)
        setattr(module, name, nn.Parameter(empty, requires_grad=param.requires_grad))
    for name, buffer in list(module.named_buffers(recurse=False)):
        module._buffers[name] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)


class LlamaForCausalLM(nn.Module):
    """``forward(batch)`` returns float32 logits ``[B, vocab]`` of each sequence's last new token.

    Parameters are created uninitialised on ``device`` in ``dtype`` (linear
    layers as placeholders); load a checkpoint with
    :func:`tercet.model.weights.load_weights`, then
    :meth:`attach` the attention backend and KV cache before the first forward.
    ``max_positions`` bounds the rotary tables when the context is capped below
    the config's ``max_position_embeddings``; ``tp`` makes this rank's shard.
    """

    def __init__(self, config, dtype: torch.dtype, device: torch.device | str, max_positions: int | None = None,
                 tp: TensorParallel = SINGLE):
        super().__init__()
        self.shape = LlamaShape.from_config(config)
        self.shards = LlamaShards.of(self.shape, tp)
        self.tp = tp
        self.dtype = dtype
        self.device = torch.device(device)
        # Build on the meta device so no time goes into random initialisation
        # of weights the checkpoint overwrites anyway. Linear layers stay
        # there as placeholders: loading replaces each with the layer its
        # linear method makes (tercet.model.weights), so no full-precision
        # copy of a quantized weight is ever allocated.
        with torch.device("meta"):
            self.model = LlamaModel(self.shape, self.shards)
            self.lm_head = nn.Linear(self.shape.hidden_size, self.shards.local_vocab, bias=False)
            self.to(dtype)
        for module in self.modules():
            if not isinstance(module, nn.Linear):
                _allocate_on(module, self.device)
        self.rotary = RotaryEmbedding(
            RopeSettings.from_config(config),
            self.shape.head_dim,
            max_positions or self.shape.max_position_embeddings,
            dtype,
            self.device,
        )
        self.attention_backend: AttentionBackend | None = None
        self.kv_cache: PagedKVCache | None = None
        # What runs the decoder layers of every step, given by attach.
        self.layer_runner: LayerRunner | None = None
        # Whether the LoRA backend adds the deltas a C layer runner would (set by tercet.lora.lora_model):
        # a step with adapters may then stay in the one call.
        self.native_lora = False

    def attach(self, attention_backend: AttentionBackend, kv_cache: PagedKVCache,
               layer_runner: LayerRunner | None = None) -> None:
        """Run over ``attention_backend`` and ``kv_cache``, the layers on ``layer_runner`` (made for both;
        None: :class:`TorchLayers`). A model runner chooses it: :mod:`tercet.model.layer_runner_choice`."""
        self.attention_backend = attention_backend
        self.kv_cache = kv_cache
        self.layer_runner = layer_runner or TorchLayers(self.model.layers, self.rotary, attention_backend, kv_cache)

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Run one step; the backend must already be prepared for ``batch``."""
        return self.logits_of(self.hidden_states(batch)[batch.last_token_indices])

    def forward_with_prompt_logits(
        self, batch: ForwardBatch, sequence_indices: list[int]
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """``forward``'s logits ``[B, vocab]``, plus the logits ``[extend_len_i, vocab]`` of every
        new token of the sequences at ``sequence_indices`` (for prompt log-probabilities).

        The LM head runs over those rows only, never over all T tokens of the batch."""
        hidden = self.hidden_states(batch)
        starts, lengths = batch.host_spans(sequence_indices)
        full_rows = [torch.arange(start, start + length, device=hidden.device) for start, length in zip(starts, lengths)]
        rows = torch.cat([batch.last_token_indices, *full_rows])
        last_logits, *full_logits = self.logits_of(hidden[rows]).split([batch.batch_size, *lengths])
        return last_logits, dict(zip(sequence_indices, full_logits))

    def hidden_states(self, batch: ForwardBatch) -> torch.Tensor:
        """The last decoder layer's output ``[T, hidden]`` for every new token, before the final norm."""
        if self.layer_runner is None:
            raise RuntimeError("attach an attention backend and a KV cache before calling forward")
        return self.layer_runner.run(self.embed(batch.input_ids), batch, self.native_lora)

    def final_hidden_states(self, batch: ForwardBatch) -> torch.Tensor:
        """Every new token's hidden state after the final norm, ``[T, hidden]``: what embeddings pool."""
        return self.model.norm(self.hidden_states(batch))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not self.tp.enabled:
            return self.model.embed_tokens(input_ids)
        # Each rank looks up the ids in its slice of the vocabulary, and zeros
        # for the others; the sum over the ranks is every id's row.
        local = input_ids - self.shards.vocab_start
        elsewhere = (local < 0) | (local >= self.shards.local_vocab)
        hidden = self.model.embed_tokens(local.masked_fill(elsewhere, 0))
        return self.tp.all_reduce(hidden.masked_fill(elsewhere.unsqueeze(-1), 0))

    def logits_of(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits of the given rows of ``hidden_states``."""
        logits = self.lm_head(self.model.norm(hidden)).float()
        if self.tp.enabled:
            # Each rank has its slice of the vocabulary; sampling needs all of it (less the padding).
            logits = self.tp.all_gather_columns(logits)[:, : self.shape.vocab_size]
        return logits

    def attention_layout(self) -> AttentionLayout:
        """What the attention backend and the KV cache hold on this rank: its own heads."""
        return AttentionLayout(
            num_heads=self.shards.local_heads,
            num_kv_heads=self.shards.local_kv_heads,
            head_dim=self.shape.head_dim,
            num_layers=self.shape.num_layers,
            device=self.device,
            dtype=self.dtype,
        )
