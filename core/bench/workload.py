"""Synthetic prompts of an exact token length, reproducible from a seed.

A prompt is random token ids drawn from the tokenizer's ordinary vocabulary
(special and added tokens such as ``<|im_start|>`` left out) and decoded to
text. Decoding then encoding is not an identity — neighbouring pieces merge,
byte fragments become U+FFFD — so the text is encoded again and its ids are
trimmed, or topped up with fresh draws, until the text encodes to exactly the
asked length. With SmolLM2's tokenizer that settles within two rounds. Should
it not settle within ``MAX_ROUNDS``, the prompt keeps the length it really
has in ``prompt_len``: that field is always the true length, never a claim.

Lengths count what ``tokenizer.encode(text)`` gives, which is how tercet (and
most servers) encode a text prompt: special tokens the tokenizer adds by
itself, such as a BOS, count towards the length.

Prompt ``i`` comes from its own generator seeded by ``(kind, seed, i)``, so
the first k prompts are the same whatever the number of prompts, warm-up
prompts never repeat measured ones, and two prompts share a prefix only by
chance (so a prefix cache does not flatter the numbers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tercet.bench import BenchError

MAX_ROUNDS = 10


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_len: int  # tokens the prompt encodes to
    output_len: int  # tokens asked for (max_tokens, with ignore_eos)


def load_tokenizer(path: str | Path | None):
    """The tokenizer of ``path`` (a checkpoint directory or a .gguf file); without one, the default model's."""
    from tercet.errors import ConfigError
    from tercet.formats.default_model import find_default_gguf
    from tercet.tokenizer.loading import load_tokenizer as load_served_tokenizer

    try:
        return load_served_tokenizer(str(find_default_gguf() if path is None else path))
    except (ConfigError, OSError, ValueError) as error:
        raise BenchError(f"cannot load a tokenizer from {str(path)!r}: {error}") from None


def ordinary_token_ids(tokenizer) -> list[int]:
    """Every token id but the special and added ones, in id order."""
    excluded = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    return [token_id for token_id in range(len(tokenizer)) if token_id not in excluded]


def synthetic_requests(
    tokenizer, num_prompts: int, input_len: int, output_len: int, seed: int, kind: str = "measured"
) -> list[BenchRequest]:
    """``num_prompts`` distinct prompts of ``input_len`` tokens; ``kind`` separates e.g. warm-up prompts."""
    vocabulary = ordinary_token_ids(tokenizer)
    num_added = _num_added_special_tokens(tokenizer)
    if input_len <= num_added:
        raise BenchError(f"input_len must be more than the {num_added} special tokens the tokenizer adds")
    requests = []
    for index in range(num_prompts):
        rng = random.Random(f"{kind}:{seed}:{index}")
        prompt = _prompt_of_length(tokenizer, vocabulary, input_len - num_added, rng)
        requests.append(BenchRequest(prompt, len(tokenizer.encode(prompt)), output_len))
    return requests


def _prompt_of_length(tokenizer, vocabulary: list[int], length: int, rng: random.Random) -> str:
    token_ids = [rng.choice(vocabulary) for _ in range(length)]
    for _ in range(MAX_ROUNDS):
        text = tokenizer.decode(token_ids)
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == length:
            break
        # Keep what the text really encodes to, then cut or top up to the length.
        token_ids = encoded[:length] + [rng.choice(vocabulary) for _ in range(length - len(encoded))]
    return text


def _num_added_special_tokens(tokenizer) -> int:
    return len(tokenizer.encode("a")) - len(tokenizer.encode("a", add_special_tokens=False))
