"""What a checkpoint's tensors are stored as, and which linear method will serve each format.

Read from file headers only (a GGUF's tensor table, safetensors' JSON
header), without torch, so ``tercet config show`` can say what would be
served without loading a model.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

# GGUF block formats, each served by the linear method of its lower-case name under "auto".
BLOCK_FORMATS = ("Q4_0", "Q4_1", "Q8_0")


def checkpoint_formats(path: str | Path) -> dict[str, int]:
    """``{format: number of tensors}``: GGUF type names, or safetensors dtypes ("F32", "BF16")."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        from tercet.formats.gguf_file import GgufFile

        with GgufFile(path) as gguf:
            return gguf_formats(gguf)
    formats: collections.Counter[str] = collections.Counter()
    for file_path in sorted(path.glob("*.safetensors")):
        with open(file_path, "rb") as file:
            header_length = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(header_length))
        formats.update(entry["dtype"] for name, entry in header.items() if name != "__metadata__")
    return dict(formats) or {"pytorch": 1}


def gguf_formats(gguf) -> dict[str, int]:
    """``{GGUF type name: number of tensors}`` of an open :class:`tercet.formats.gguf_file.GgufFile`."""
    return dict(collections.Counter(tensor.type_name for tensor in gguf.tensors.values()))


def method_for_format(tensor_format: str, quantization: str) -> str:
    """The linear method that serves a weight stored as ``tensor_format`` under ``quantization``."""
    if quantization == "auto":
        return tensor_format.lower() if tensor_format in BLOCK_FORMATS else "dense"
    return "dense" if quantization == "none" else quantization


def describe_weights(path: str | Path, quantization: str) -> str:
    """Lines for ``tercet config show``: each stored format and the method that serves it."""
    formats = checkpoint_formats(path)
    lines = [f"# weights: {path}"]
    for tensor_format, count in sorted(formats.items(), key=lambda item: -item[1]):
        # 1-D tensors (norms) are never linear layers: they stay dense.
        lines.append(f"#   {count} tensors stored as {tensor_format} -> {method_for_format(tensor_format, quantization)}")
    return "\n".join(lines)
