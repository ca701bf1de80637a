"""The default model dequantized into a Hugging Face checkpoint: the reference transformers runs.

tercet serves the default model straight from its GGUF. transformers cannot
run a GGUF's blocks, so comparisons against it (the test suite's token for
token checks, ``tercet bench-offline``) need the same weights as an ordinary
checkpoint: transformers dequantizes the GGUF once, and we write the result
(safetensors, config.json, tokenizer and chat template) into a cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tercet.formats.default_model import DEFAULT_MODEL_NAME, default_cache_dir, find_default_gguf


def ensure_dequantized_default_model(cache_dir: str | None = None, progress: bool = True) -> Path:
    """The dequantized default model's directory, converting it on first use."""
    models_dir = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "models"
    target = models_dir / DEFAULT_MODEL_NAME
    if _is_complete(target):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    report = _Progress(progress)
    with _exclusive_lock(models_dir / f".{DEFAULT_MODEL_NAME}.lock", report):
        # Another process may have finished the conversion while we waited.
        if not _is_complete(target):
            _remove_abandoned_staging(models_dir)
            _convert(find_default_gguf(), target, report)
    return target


def _is_complete(model_dir: Path) -> bool:
    # The directory only appears through an atomic rename, so its presence
    # with a config means a finished conversion.
    return (model_dir / "config.json").is_file() and (model_dir / "model.safetensors").is_file()


def _remove_abandoned_staging(models_dir: Path) -> None:
    # Holding the lock means no conversion is running: any staging directory
    # left is from one that was killed.
    for path in models_dir.glob(f".{DEFAULT_MODEL_NAME}.*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path, report: _Progress):
    with open(lock_path, "w") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report("another process is converting the default model; waiting for it")
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


class _Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        if self.enabled:
            elapsed = time.monotonic() - self.started
            print(f"[tercet] {message} ({elapsed:.0f}s)", file=sys.stderr, flush=True)


def _convert(gguf_path: Path, target: Path, progress: _Progress) -> None:
    progress(f"dequantizing the default model {DEFAULT_MODEL_NAME} from {gguf_path.name} for transformers (once, about a minute)")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.", dir=target.parent))
    try:
        progress("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        progress("dequantizing the weights")
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
        )
        progress("writing safetensors")
        # save_pretrained refuses GGUF-quantized models, so write the checkpoint ourselves.
        state_dict = {
            name: tensor.detach().contiguous()
            for name, tensor in model.state_dict().items()
            if not (name == "lm_head.weight" and model.config.tie_word_embeddings)
        }
        save_file(state_dict, str(staging / "model.safetensors"), metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(_plain_config(model.config, type(model).__name__), indent=2) + "\n")
        tokenizer.save_pretrained(str(staging))
        _check_chat_template(staging)
        progress("finishing")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        if target.exists():
            # Left by something other than our rename (which is atomic): not ours to trust.
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"default model ready at {target}")


def _plain_config(config, architecture: str) -> dict:
    config_dict = config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict["architectures"] = [architecture]
    config_dict["torch_dtype"] = "float32"
    config_dict["dtype"] = "float32"
    return config_dict


def _check_chat_template(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    if not AutoTokenizer.from_pretrained(str(model_dir)).chat_template:
        raise RuntimeError("the converted tokenizer lost its chat template")
