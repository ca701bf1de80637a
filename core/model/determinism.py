"""``model.deterministic``: the check that every part of a step can keep the promise.

With it, a request's tokens are a function of the request alone: not of its
batch-mates, of how its prompt was chunked, or of what the prefix cache held.
That holds when each token's computation does not depend on the other rows
of a step:

- linear layers on a batch-invariant kernel (the GGUF block kernel marks its
  layers ``batch_invariant``; oneDNN's and MKL's matmuls block by the number
  of rows, so dense weights cannot promise it);
- attention computed per query token in a fixed order, prompt tokens as decode
  tokens are (the ``paged_cpu`` backend; others refuse ``layout.deterministic``);
- norms, SiLU and rotary row by row, and sampling from a per-request seeded
  draw, which they are.

:func:`require_batch_invariant_layers` refuses at start-up what cannot.
"""

from __future__ import annotations

from torch import nn

from tercet.errors import ConfigError

# The linear-layer types a model is built of before a linear method replaces them.
_PLACEHOLDERS = (nn.Linear,)


def require_batch_invariant_layers(model: nn.Module) -> None:
    """Raise ConfigError naming the linear layers of ``model`` whose rows depend on each other."""
    offending = [
        name for name, module in model.named_modules()
        if _is_linear(module) and not getattr(module, "batch_invariant", False)
    ]
    if offending:
        raise ConfigError(
            f"model.deterministic = true needs every linear layer on a batch-invariant kernel, and "
            f"{len(offending)} are not (the first: {offending[0]}): serve a GGUF's Q4_0, Q4_1 or Q8_0 blocks "
            "(model.quantization auto, q4_0, q4_1 or q8_0) on a CPU with AVX2, AVX-512 or NEON, with "
            "model.native_kernels = true"
        )


def _is_linear(module: nn.Module) -> bool:
    # A linear method's layer has in_features/out_features and is a leaf of the model's tree.
    return isinstance(module, _PLACEHOLDERS) or (
        hasattr(module, "in_features") and hasattr(module, "out_features") and not list(module.children())
    )
