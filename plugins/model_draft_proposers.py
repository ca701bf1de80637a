"""The proposers that draft with a model: ``self_quantized`` and ``draft_model``.

Neither holds model code: each answers a :class:`tercet.plugin_api.DraftModel`,
and the scheduler loads that model beside the served one, with a small KV pool
of its own, and drafts greedily with it.

- ``self_quantized``: the served checkpoint itself, its linear layers in a
  4-bit method (``[speculative] self_quantization``, q4_1 by default), drafting
  for the model served dense in float32 or bfloat16: a GGUF served with
  ``model.quantization = "none"`` drafts with its own blocks as they ship.
- ``draft_model``: a second, smaller model of the same tokenizer
  (``[speculative] draft_model``, in ``draft_quantization``).
"""

from __future__ import annotations

from tercet.plugin_api import ConfigError, DraftModel, hookimpl


def self_quantized(config) -> DraftModel:
    return DraftModel(
        config.model.path, config.speculative.self_quantization, proposer="self_quantized",
        config_key="speculative.self_quantization", requires_dense_target=True,
    )


def draft_model(config) -> DraftModel:
    path = config.speculative.draft_model
    if not path:
        raise ConfigError('speculative.proposer = "draft_model" needs speculative.draft_model: the path of '
                          "a smaller checkpoint of the served model's tokenizer")
    return DraftModel(path, config.speculative.draft_quantization)


@hookimpl
def register_speculative_proposers(register):
    register("self_quantized", self_quantized)
    register("draft_model", draft_model)
