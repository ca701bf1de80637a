"""The parts a model runner is built from, as a process's config chooses them among the plugins.

``[attention] backend`` names the attention backend (``"auto"``: the built-in one for the device),
and every registered linear method and architecture is offered: :class:`ModelComponents`. The
scheduler process builds its runner (and a draft model's, :mod:`tercet.scheduler.speculative.model_drafter`)
with these; a runner itself never looks plugins up. ``context`` is passed in, never imported: the model
side does not import tercet.processes.
"""

from __future__ import annotations

from tercet.model.components import ModelComponents

# What ``attention.backend = "auto"`` runs, by device type; any other device gets the fallback.
AUTO_ATTENTION_BACKENDS = {"cpu": "paged_cpu"}
AUTO_ATTENTION_FALLBACK = "torch_native"


def model_components(context) -> ModelComponents:
    """The plugins' parts a model runner is built from, as ``context`` (a process's
    :class:`tercet.processes.context.ProcessContext`) chooses them."""
    return ModelComponents(
        attention_backend=context.chosen("attention_backends") or _auto_attention_backend(context),
        linear_methods=context.registries.linear_methods.factories(),
        architectures=context.registries.model_architectures.factories(),
    )


def _auto_attention_backend(context):
    """The built-in backend for the configured device, or the fallback when that plugin is disabled."""
    from tercet.model.model_runner import resolve_device

    backends = context.registries.attention_backends
    device = resolve_device(context.config.model.device)
    preferred = AUTO_ATTENTION_BACKENDS.get(device.type, AUTO_ATTENTION_FALLBACK)
    return backends.get(preferred if preferred in backends.names() else AUTO_ATTENTION_FALLBACK)
