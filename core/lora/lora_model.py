"""A Llama-family model made to serve LoRA adapters: its projections wrapped, its adapters' weights held.

:class:`LoraModel` wraps the four projections of every decoder layer
(q/k/v, o, gate/up, down: the model fuses q/k/v and gate/up, so one PEFT
module is a part of a fused projection, at its columns) in
:class:`tercet.lora.lora_linear.LoraLinear`, keeps each loaded adapter's
weights on the model's device, and says, per step, which rows use which
adapter (:meth:`serving`). It knows nothing of requests: which adapters are
loaded, and which one goes, is the scheduler's (:mod:`tercet.scheduler.lora_adapters`).

Under tensor parallelism an adapter shards as its base layers do: a
column-parallel projection's part (q/k/v, gate/up) keeps the rows of its B
that give this rank's output columns, and all of A; a row-parallel one (o,
down) keeps the columns of its A that read this rank's input, and all of B,
so its delta is a partial sum that the all-reduce after the projection
completes, as the base layer's own output is.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tercet.errors import ConfigError
from tercet.lora.adapter_files import LoraAdapterError, PartShape, read_adapter
from tercet.lora.backend import LoraBackend
from tercet.lora.lora_linear import AdapterRun, AdapterWeights, LoraLinear, LoraStep, weights_of_projection

# The projections that read a slice of their input on each tensor-parallel rank (their output is summed).
ROW_PARALLEL = ("o", "down")
# Each wrapped projection: where it hangs in a decoder layer, and its parts in the order of its output columns.
PROJECTIONS = {"qkv": ("self_attn", "qkv_proj", ("q", "k", "v")), "o": ("self_attn", "o_proj", ("o",)),
               "gate_up": ("mlp", "gate_up_proj", ("gate", "up")), "down": ("mlp", "down_proj", ("down",))}


@dataclass(frozen=True)
class PartPlace:
    projection: str
    column: int
    shape: PartShape


@dataclass(frozen=True)
class LoadedAdapter:
    name: str
    path: str
    rank: int
    num_bytes: int  # of the tensors held (this rank's shards, in the model's dtype)
    weights: AdapterWeights  # (layer, projection) -> LoraWeights


class LoraModel:
    def __init__(self, model, backend: LoraBackend, max_rank: int):
        self.step = LoraStep(backend)
        self.max_rank = max_rank
        self.dtype, self.device = model.dtype, model.device
        self.shards = model.shards
        self.places = _part_places(model)
        self.targets = {key: place.shape for key, place in self.places.items()}
        self.adapters: dict[str, LoadedAdapter] = {}
        self.install(model)

    def install(self, model) -> None:
        """Wrap ``model``'s projections (again, after its weights were reloaded)."""
        # The one-call C runner adds the deltas itself where they are the sums this backend adds.
        model.native_lora = getattr(self.step.backend, "native_equivalent", False)
        for index, layer in enumerate(model.model.layers):
            for projection, (block, attribute, _) in PROJECTIONS.items():
                parent = getattr(layer, block)
                base = getattr(parent, attribute)
                base = base.base if isinstance(base, LoraLinear) else base
                setattr(parent, attribute, LoraLinear(base, (index, projection), self.step))

    def load(self, name: str, path: str) -> LoadedAdapter:
        """Read, check and hold the adapter; a failure holds nothing of it."""
        if name in self.adapters:
            raise LoraAdapterError(f"a LoRA adapter named {name!r} is already loaded", "lora_name")
        tensors = read_adapter(name, path, self.targets, self.max_rank, self.dtype)
        by_projection: dict[tuple[int, str], list] = {}
        for (layer, part), (lora_a, lora_b) in sorted(tensors.tensors.items(), key=self._column_order):
            place = self.places[(layer, part)]
            lora_a, lora_b = self._shard(layer, part, place.projection, lora_a, lora_b)
            by_projection.setdefault((layer, place.projection), []).append(
                (place.column, lora_a.to(self.device), lora_b.to(self.device))
            )
        weights = AdapterWeights((key, weights_of_projection(parts)) for key, parts in by_projection.items())
        adapter = LoadedAdapter(name, str(path), tensors.rank, held_bytes(weights), weights)
        self.adapters[name] = adapter
        return adapter

    def _shard(self, layer: int, part: str, projection: str, lora_a, lora_b):
        """This rank's share of a part's A and B (both whole without tensor parallelism)."""
        block, attribute, _ = PROJECTIONS[projection]
        module = f"model.layers.{layer}.{block}.{attribute}"
        if part in ROW_PARALLEL:
            return self.shards.part(module, None, lora_a), lora_b
        return lora_a, self.shards.part(module, part if projection == "qkv" else None, lora_b)

    def _column_order(self, item) -> tuple:
        (layer, part), _ = item
        place = self.places[(layer, part)]
        return layer, place.projection, place.column

    def unload(self, name: str) -> None:
        self.adapters.pop(name, None)

    def runs_of(self, adapter_names: list[str | None], extend_lens: list[int]) -> tuple[AdapterRun, ...]:
        """The step's runs of consecutive rows sharing an adapter (rows of the base model are in none)."""
        runs, start = [], 0
        for name, length in zip(adapter_names, extend_lens):
            if name is not None:
                weights = self.adapters[name].weights
                if runs and runs[-1].weights is weights and runs[-1].stop == start:
                    runs[-1] = AdapterRun(runs[-1].start, start + length, weights)
                else:
                    runs.append(AdapterRun(start, start + length, weights))
            start += length
        return tuple(runs)

    @contextlib.contextmanager
    def serving(self, runs: tuple[AdapterRun, ...]):
        """Every wrapped projection adds these runs' deltas while the block runs."""
        self.step.runs = runs
        try:
            yield
        finally:
            self.step.runs = ()


def held_bytes(weights: AdapterWeights) -> int:
    """Bytes of the tensors an adapter holds: every projection's stacked A and its parts' B."""
    tensors = [tensor for projection in weights.values()
               for tensor in (projection.lora_a, *(part.lora_b for part in projection.parts))]
    return sum(tensor.untyped_storage().nbytes() for tensor in tensors)


def _part_places(model) -> dict[tuple[int, str], PartPlace]:
    """Where every part of every layer sits in its projection (on this rank), and its whole shape
    (what a PEFT adapter of the model holds, before it is sharded)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not hasattr(model, "shards"):
        raise ConfigError(f"LoRA adapters need a Llama-family model; {type(model).__name__} is not one")
    shape, local_intermediate = model.shape, model.shards.local_intermediate
    hidden, intermediate = shape.hidden_size, shape.intermediate_size
    q_whole, kv_whole = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    places = {}
    for index, layer in enumerate(layers):
        q_size, kv_size = layer.self_attn.q_size, layer.self_attn.kv_size
        # (first column on this rank, in, out) of each part.
        shapes = {"q": (0, hidden, q_whole), "k": (q_size, hidden, kv_whole), "v": (q_size + kv_size, hidden, kv_whole),
                  "o": (0, q_whole, hidden), "gate": (0, hidden, intermediate),
                  "up": (local_intermediate, hidden, intermediate), "down": (0, intermediate, hidden)}
        for projection, (_, _, parts) in PROJECTIONS.items():
            for part in parts:
                column, in_features, out_features = shapes[part]
                places[(index, part)] = PartPlace(projection, column, PartShape(in_features, out_features))
    return places

