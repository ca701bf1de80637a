"""The built-in grammar backend (llguidance), measured on the served tokenizer.

What docs/plugins.md cites for ``register_grammar_backends``: how long the
backend takes to compile a mid-size JSON schema for the default model's
tokenizer (SmolLM2-135M-Instruct, 49152 tokens), cold and then warm (a
different schema of the same size), and how long one row's next-token
bitmask takes to fill while a matcher walks a valid document token by token,
at batch 1 and batch 32 (median and p90 over the steps). The backend is the
one the scheduler uses, made by its plugin from tercet's registry, so it is
measured through the same ``GrammarBackend`` calls. Every document token is
checked to be allowed by its mask, so a fast wrong mask cannot pass.

    python benchmarks/grammar_backends.py [--documents 8] [--batch 32]

Nothing is downloaded: the tokenizer comes from the default GGUF.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from tercet.formats.default_model import find_default_gguf
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.scheduler.grammar.grammar_backend import GrammarTokenizer
from tercet.tokenizer.loading import load_tokenizer

BACKEND = "llguidance"
VOCAB_SIZE = 49152
EOS_ID = 2

SKU = "^[A-Z]{3}-[0-9]{4}$"
BARCODE = "^[0-9]{13}$"
COUNTRY = "^[A-Z]{2}$"
PHONE = "^\\+[0-9]{1,3}-[0-9]{3}-[0-9]{4}$"
POSTAL = "^[0-9]{5}$"

PRODUCT_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "sku": {"type": "string", "pattern": SKU},
        "name": {"type": "string", "minLength": 3, "maxLength": 40},
        "description": {"type": "string", "maxLength": 120},
        "category": {"enum": ["electronics", "books", "clothing", "home", "toys", "sports"]},
        "price": {"type": "number", "minimum": 0, "maximum": 100000},
        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
        "stock": {"type": "integer", "minimum": 0, "maximum": 10000},
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "active": {"type": "boolean"},
        "release_date": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 4},
        "dimensions": {
            "type": "object",
            "properties": {
                "width": {"type": "number", "minimum": 0, "maximum": 500},
                "height": {"type": "number", "minimum": 0, "maximum": 500},
                "depth": {"type": "number", "minimum": 0, "maximum": 500},
                "unit": {"enum": ["cm", "in"]},
            },
            "required": ["width", "height", "depth", "unit"],
            "additionalProperties": False,
        },
        "supplier": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2, "maxLength": 30},
                "email": {"type": "string", "format": "email"},
                "country": {"type": "string", "pattern": COUNTRY},
            },
            "required": ["name", "email"],
            "additionalProperties": False,
        },
        "variants": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "color": {"type": "string", "maxLength": 12},
                    "size": {"enum": ["S", "M", "L", "XL"]},
                    "extra_cost": {"type": "number", "minimum": 0, "maximum": 1000},
                },
                "required": ["color", "size"],
                "additionalProperties": False,
            },
        },
        "barcode": {"type": "string", "pattern": BARCODE},
    },
    "required": ["id", "sku", "name", "category", "price", "currency", "stock", "active",
                 "release_date", "tags", "dimensions", "supplier"],
    "additionalProperties": False,
}

WORDS = ("alpha", "bravo", "delta", "echo", "fox", "golf", "hotel", "lima", "mike", "nova", "oscar", "papa", "romeo",
         "sierra", "tango", "victor", "zulu", "amber", "cedar", "maple", "river", "stone", "cloud", "ember", "frost",
         "lunar", "solar")
PATTERN_SAMPLERS = {
    SKU: lambda r: "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(3)) + f"-{r.randrange(10000):04d}",
    BARCODE: lambda r: "".join(r.choice("0123456789") for _ in range(13)),
    COUNTRY: lambda r: r.choice(["US", "DE", "FR", "JP", "GB", "NL"]),
    PHONE: lambda r: f"+{r.randint(1, 999)}-{r.randrange(1000):03d}-{r.randrange(10000):04d}",
    POSTAL: lambda r: f"{r.randrange(100000):05d}",
}
FORMAT_SAMPLERS = {
    "uuid": lambda r: (f"{r.getrandbits(32):08x}-{r.getrandbits(16):04x}-4{r.getrandbits(12):03x}"
                       f"-a{r.getrandbits(12):03x}-{r.getrandbits(48):012x}"),
    "date": lambda r: f"{r.randint(1950, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "date-time": lambda r: (f"{r.randint(2000, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
                            f"T{r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}Z"),
    "email": lambda r: f"{r.choice(WORDS)}.{r.choice(WORDS)}@example.com",
}


def sample_instance(schema: dict, rng: random.Random):
    """A random value valid against the (small subset of JSON Schema used above) ``schema``."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "object":
        required = set(schema.get("required", ()))
        return {key: sample_instance(sub, rng) for key, sub in schema["properties"].items()
                if key in required or rng.random() < 0.6}
    if kind == "array":
        return [sample_instance(schema["items"], rng) for _ in range(rng.randint(1, schema.get("maxItems", 3)))]
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "integer":
        return rng.randint(schema.get("minimum", 0), min(schema.get("maximum", 10**6), 10**6))
    if kind == "number":
        low, high = schema.get("minimum", 0), min(schema.get("maximum", 10**4), 10**4)
        return round(rng.uniform(low, high), 2)
    if kind == "string":
        if "pattern" in schema:
            return PATTERN_SAMPLERS[schema["pattern"]](rng)
        if "format" in schema:
            return FORMAT_SAMPLERS[schema["format"]](rng)
        low, high = schema.get("minLength", 0), schema.get("maxLength", 30)
        text = rng.choice(WORDS)
        while len(text) < low or (rng.random() < 0.5 and len(text) + 6 <= high):
            text += " " + rng.choice(WORDS)
        return text[:high]
    raise ValueError(f"no sampler for {schema}")


def documents(schema: dict, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [json.dumps(sample_instance(schema, rng), separators=(", ", ": ")) for _ in range(count)]


def renamed(schema: dict, number: int) -> dict:
    """``schema`` with every top-level property renamed: the same size, not in any cache."""
    return {**schema, "properties": {f"{key}_{number}": value for key, value in schema["properties"].items()},
            "required": [f"{key}_{number}" for key in schema["required"]]}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def allows(bitmask: torch.Tensor, row: int, token: int) -> bool:
    return bool((int(bitmask[row, token >> 5]) >> (token & 31)) & 1)


def walk(backend, compiled, docs: list[list[int]]) -> list[float]:
    """Matchers walking ``docs`` together; each step's fill time per row, while every row is in its document."""
    matchers = [backend.matcher(compiled) for _ in docs]
    bitmask = torch.zeros((len(docs), (VOCAB_SIZE + 31) // 32), dtype=torch.int32)
    per_row = []
    for position in range(min(len(doc) for doc in docs)):
        bitmask.zero_()
        started = time.perf_counter()
        for row, matcher in enumerate(matchers):
            matcher.fill_bitmask(bitmask, row)
        per_row.append((time.perf_counter() - started) / len(docs))
        for row, (matcher, doc) in enumerate(zip(matchers, docs)):
            if not allows(bitmask, row, doc[position]) or not matcher.accept(doc[position]):
                sys.exit(f"the mask refused token {doc[position]} of document row {row} at position {position}")
    return per_row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=8, help="documents walked at batch 1")
    parser.add_argument("--batch", type=int, default=32, help="rows walked together")
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(find_default_gguf()))
    served = GrammarTokenizer(tokenizer.backend_tokenizer.to_str(), VOCAB_SIZE, frozenset({EOS_ID}))
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    backend, made_s = timed(registries.grammar_backends.get(BACKEND), served)
    compiled, cold_s = timed(backend.compile, "json_schema", json.dumps(PRODUCT_SCHEMA))
    _, warm_s = timed(backend.compile, "json_schema", json.dumps(renamed(PRODUCT_SCHEMA, 1)))
    _, regex_s = timed(backend.compile, "regex", r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])")
    texts = documents(PRODUCT_SCHEMA, max(args.documents, args.batch), seed=0)
    docs = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    single = [step for doc in docs[: args.documents] for step in walk(backend, compiled, [doc])]
    batched = walk(backend, compiled, docs[: args.batch])
    print(f"{BACKEND} on {VOCAB_SIZE} tokens: backend made in {made_s * 1e3:.0f} ms; mid-size schema compiled "
          f"cold {cold_s * 1e3:.1f} ms, warm {warm_s * 1e3:.1f} ms; a date regex {regex_s * 1e3:.1f} ms")
    for label, steps in ((f"batch 1 ({args.documents} documents)", single), (f"batch {args.batch}", batched)):
        print(f"  one row's mask, {label}: median {statistics.median(steps) * 1e6:.1f} us, "
              f"p90 {percentile(steps, 0.9) * 1e6:.1f} us over {len(steps)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
