"""Loading the model's tokenizer (transformers supplies tokenizer and chat template)."""

from __future__ import annotations


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)
