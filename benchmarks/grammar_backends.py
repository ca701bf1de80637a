"""Grammar backends for constrained decoding, measured on the served tokenizer.

Compares the libraries a built-in constrained-decoding backend could sit on
(xgrammar, llguidance, outlines-core: whichever are importable) on the default
model's tokenizer (SmolLM2-135M-Instruct, 49152 tokens, EOS id 2):

* compile: building the library's tokenizer info, the first (cold) compile of a
  mid-size JSON schema, the time to its first mask, a second (warm) compile of a
  different schema of the same size, a regex, and ``json_object`` (any object);
* masks: the time to fill the next-token bitmask ``[B, ceil(V/32)]`` int32 per
  decoding step, at batch 1 and batch 32 (32 matchers each walking its own valid
  document of the schema token by token), row by row and through the library's
  batch API where it has one, median and p90 over the steps; the time to accept
  one token; the time to apply a bitmask to float32 logits ``[B, 49152]``;
* correctness: every token of the valid documents is allowed, EOS only at the
  end, special tokens never; a few schema-invalid documents (out-of-range
  number, broken pattern, unknown enum, missing field, ...) and whether each
  library's masks reject them;
* compile off the hot path: the longest a Python thread is stalled while
  another thread compiles (does the compile release the GIL), and two compiles
  in two threads against one after the other;
* error text for a malformed schema, an unsatisfiable schema, a malformed
  regex and an unsatisfiable regex.

Each library runs in its own child process (so "cold" is cold, and one
library's threads or imports don't touch another's), ``--repeats`` times,
interleaved; the tables show the median over the repeats and a last table how
far the repeats spread. Nothing is downloaded: the tokenizer comes from the
default GGUF through ``tercet.tokenizer.loading.load_tokenizer``.

    pip install --no-deps xgrammar apache-tvm-ffi llguidance outlines-core   # any of them
    python benchmarks/grammar_backends.py [--repeats 5] [--libs xgrammar,llguidance,outlines_core]
        [--batch 32] [--threads 2] [--torch-threads 1] [--json results.json]
    python benchmarks/grammar_backends.py --from-json results.json   # the tables again

One run of all three takes about 40 s here (outlines-core's compiles are most of it).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

LIBRARIES = ("xgrammar", "llguidance", "outlines_core")
DISTRIBUTIONS = {"xgrammar": "xgrammar", "llguidance": "llguidance", "outlines_core": "outlines-core"}
VOCAB_SIZE = 49152
EOS_ID = 2

# --- the grammars -----------------------------------------------------------------------------

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

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "person_id": {"type": "integer", "minimum": 1, "maximum": 99999999},
        "first_name": {"type": "string", "minLength": 1, "maxLength": 30},
        "last_name": {"type": "string", "minLength": 1, "maxLength": 30},
        "email": {"type": "string", "format": "email"},
        "phone": {"type": "string", "pattern": PHONE},
        "birth_date": {"type": "string", "format": "date"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "status": {"enum": ["active", "inactive", "pending"]},
        "height_m": {"type": "number", "minimum": 0.5, "maximum": 2.5},
        "married": {"type": "boolean"},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string", "maxLength": 40},
                "city": {"type": "string", "maxLength": 30},
                "postal_code": {"type": "string", "pattern": POSTAL},
                "country": {"type": "string", "pattern": COUNTRY},
            },
            "required": ["street", "city", "country"],
            "additionalProperties": False,
        },
        "employment": {
            "type": "object",
            "properties": {
                "company": {"type": "string", "maxLength": 30},
                "title": {"type": "string", "maxLength": 30},
                "salary": {"type": "number", "minimum": 0, "maximum": 10000000},
                "start_date": {"type": "string", "format": "date"},
            },
            "required": ["company", "title"],
            "additionalProperties": False,
        },
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 6},
        "languages": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 16},
                               "level": {"enum": ["A1", "A2", "B1", "B2", "C1", "C2"]}},
                "required": ["name", "level"],
                "additionalProperties": False,
            },
        },
        "created_at": {"type": "string", "format": "date-time"},
    },
    "required": ["person_id", "first_name", "last_name", "email", "birth_date", "age", "status",
                 "married", "address", "skills", "created_at"],
    "additionalProperties": False,
}

DATE_REGEX = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
DATE_REGEX_SAMPLE = "2024-05-17"

MALFORMED_SCHEMA = {"type": "object", "properties": {"age": {"type": "integr"}}, "required": ["age"]}
UNSATISFIABLE_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 5}},
                        "required": ["n"]}
MALFORMED_REGEX = r"[0-9]{4}-("
UNSATISFIABLE_REGEX = r"[^\s\S]"

# --- valid instances ------------------------------------------------------------------------------

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


def dump(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def documents(schema: dict, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [dump(sample_instance(schema, rng)) for _ in range(count)]


def invalid_documents(seed: int) -> list[tuple[str, str]]:
    """Documents that are JSON but break ``PRODUCT_SCHEMA``, each in one way."""
    rng = random.Random(seed)
    base = sample_instance(PRODUCT_SCHEMA, rng)
    base["variants"] = [{"color": "red", "size": "M"}]
    cases = []

    def case(label, change):
        value = copy.deepcopy(base)
        change(value)
        cases.append((label, dump(value)))

    case("stock above maximum (10000)", lambda v: v.__setitem__("stock", 123456))
    case("price below minimum (0)", lambda v: v.__setitem__("price", -5.5))
    case("sku breaks pattern", lambda v: v.__setitem__("sku", "ab-12"))
    case("category not in enum", lambda v: v.__setitem__("category", "weapons"))
    case("required field missing", lambda v: v.pop("currency"))
    case("extra property", lambda v: v["dimensions"].__setitem__("weight", 3))
    case("tags over maxItems (4)", lambda v: v.__setitem__("tags", ["a", "b", "c", "d", "e"]))
    case("name over maxLength (40)", lambda v: v.__setitem__("name", "x" * 60))
    case("email not an email", lambda v: v["supplier"].__setitem__("email", "not an email"))
    case("date not a date", lambda v: v.__setitem__("release_date", "yesterday"))
    return cases


def schema_variant(schema: dict, number: int) -> dict:
    """``schema`` with every top-level property renamed: the same size, not in any cache."""
    variant = copy.deepcopy(schema)
    variant["properties"] = {f"{key}_{number}": value for key, value in schema["properties"].items()}
    variant["required"] = [f"{key}_{number}" for key in schema["required"]]
    return variant


# --- the backends -----------------------------------------------------------------------------------
# Each one holds the library's tokenizer info and offers the same few operations, with as little
# Python between the caller and the library as the library allows.


class XGrammar:
    def __init__(self, tokenizer, threads: int):
        import xgrammar as xgr

        self.xgr = xgr
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info(tokenizer, blank_special=True), max_threads=threads)
        self.batch = xgr.BatchGrammarMatcher(max_threads=threads)

    def tokenizer_info(self, tokenizer, blank_special: bool):
        # xgrammar takes a byte-level token spelled "<|im_start|>" for those 12 bytes of text (its
        # special_token_ids comes out empty, from_huggingface included), so JSON strings could hold
        # special tokens; an empty spelling is what makes it treat a token as special.
        special = special_ids(tokenizer) if blank_special else set()
        encoded = [""] * VOCAB_SIZE
        for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
            encoded[index] = "" if index in special else token
        return self.xgr.TokenizerInfo(encoded, self.xgr.VocabType.BYTE_LEVEL, vocab_size=VOCAB_SIZE,
                                      stop_token_ids=[EOS_ID])

    def specials_in_string_with_plain_vocab(self, tokenizer) -> list[int]:
        """The special tokens allowed inside a JSON string when the vocabulary is passed as it is."""
        import torch

        compiler = self.xgr.GrammarCompiler(self.tokenizer_info(tokenizer, blank_special=False), max_threads=1)
        matcher = self.xgr.GrammarMatcher(compiler.compile_json_schema(
            '{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}'))
        matcher.accept_string('{"a":"')
        masks = Masks(torch, 1)
        matcher.fill_next_token_bitmask(masks.tensor, 0)
        return [index for index in sorted(special_ids(tokenizer)) if masks.allows(0, index)]

    def compile_schema(self, schema: dict):
        return self.compiler.compile_json_schema(json.dumps(schema))

    def compile_regex(self, regex: str):
        return self.compiler.compile_regex(regex)

    def compile_json_object(self):
        return self.compiler.compile_builtin_json_grammar()

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    constructed_matcher = None

    def fill(self, matcher, bitmask, row: int):
        matcher.fill_next_token_bitmask(bitmask, row)

    def fill_batch(self, matchers, bitmask):
        self.batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def accept(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)

    def accept_batch(self, matchers, tokens):
        return self.xgr.BatchGrammarMatcher.batch_accept_token(matchers, tokens)

    def is_accepting(self, matcher) -> bool:
        return matcher.is_completed()

    def is_finished(self, matcher) -> bool:
        return matcher.is_terminated()

    def apply(self, logits, bitmask):
        self.xgr.apply_token_bitmask_inplace(logits, bitmask)

    def error(self, kind: str, source) -> str:
        try:
            compiled = self.compile_regex(source) if kind == "regex" else self.compile_schema(source)
        except Exception as error:  # noqa: BLE001 - the text is what is measured
            return f"{type(error).__name__} at compile: {error}"
        return f"compiles without error; {describe_first_mask(self, compiled)}"


class LLGuidance:
    def __init__(self, tokenizer, threads: int):
        import llguidance as llg

        self.llg = llg
        self.tokenizer = llg.LLTokenizer(tokenizer.to_str(), n_vocab=VOCAB_SIZE, eos_token=EOS_ID)
        self.executor = llg.LLExecutor(num_threads=threads)

    def _compiled(self, grammar: str):
        # The grammar is only text: compiling it happens when a matcher is made from it, so the
        # "compiled" object here is the text and a first matcher (which later ones are copied from).
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar, matcher

    def compile_schema(self, schema: dict):
        return self._compiled(self.llg.LLMatcher.grammar_from_json_schema(schema))

    def compile_regex(self, regex: str):
        return self._compiled(self.llg.LLMatcher.grammar_from_regex(regex))

    def compile_json_object(self):
        return self._compiled(self.llg.LLMatcher.grammar_from_json_schema({"type": "object"}))

    def matcher(self, compiled):
        # A copy of the grammar's first matcher: it shares what that one has built (lexer states),
        # where a matcher made anew from the text (constructed_matcher) starts over.
        return compiled[1].deep_copy()

    def constructed_matcher(self, compiled):
        return self.llg.LLMatcher(self.tokenizer, compiled[0], log_level=0)

    def fill(self, matcher, bitmask, row: int):
        matcher.unsafe_compute_mask_ptr(bitmask[row].data_ptr(), bitmask.shape[1] * 4)

    def fill_batch(self, matchers, bitmask):
        self.executor.unsafe_compute_mask_ptr([(m, i) for i, m in enumerate(matchers)], bitmask.data_ptr(),
                                              bitmask.shape[1] * 4, bitmask.shape[0])

    def accept(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)

    def accept_batch(self, matchers, tokens):
        return self.executor.consume_token_par(list(zip(matchers, tokens)))

    def is_accepting(self, matcher) -> bool:
        return matcher.is_accepting()

    def is_finished(self, matcher) -> bool:
        return matcher.is_stopped() and not matcher.is_error()

    apply = None  # llguidance.torch's apply is a torch.compile kernel: not measured on CPU

    def error(self, kind: str, source) -> str:
        grammar = (self.llg.LLMatcher.grammar_from_regex(source) if kind == "regex"
                   else self.llg.LLMatcher.grammar_from_json_schema(source))
        message = self.llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if message:
            return f"validate_grammar: {message}"
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        return f"validates without error; {describe_first_mask(self, (grammar, matcher))}"


class OutlinesCore:
    def __init__(self, tokenizer, threads: int):
        import outlines_core as oc

        from tercet.tokenizer.byte_level import BYTE_LEVEL_ALPHABET

        self.oc = oc
        # Special tokens are left out (a token missing from the map is never allowed); so is EOS,
        # which the Vocabulary holds apart.
        left_out = special_ids(tokenizer) | {EOS_ID}
        by_bytes: dict[bytes, list[int]] = {}
        for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
            if index not in left_out:
                by_bytes.setdefault(bytes(BYTE_LEVEL_ALPHABET[c] for c in token), []).append(index)
        self.vocabulary = oc.Vocabulary(EOS_ID, by_bytes)

    def compile_schema(self, schema: dict):
        return self.compile_regex(self.oc.json_schema.build_regex_from_schema(json.dumps(schema)))

    def compile_regex(self, regex: str):
        return self.oc.Index(regex, self.vocabulary)

    def compile_json_object(self):
        # outlines-core is regular: "any object" is only a regex with nesting bounded (depth 3).
        return self.compile_schema({"type": "object"})

    def matcher(self, compiled):
        return self.oc.Guide(compiled)

    constructed_matcher = None

    def fill(self, matcher, bitmask, row: int):
        matcher.write_mask_into(bitmask[row].data_ptr(), bitmask.shape[1], 4)

    fill_batch = None

    def accept(self, matcher, token: int) -> bool:
        if token == EOS_ID and matcher.is_finished():
            return True  # a finished Guide raises on EOS, though its mask allows it: EOS ends it
        try:
            matcher.advance(token, False)
        except ValueError:
            return False
        return True

    accept_batch = None

    def is_accepting(self, matcher) -> bool:
        return matcher.is_finished()

    def is_finished(self, matcher) -> bool:
        return matcher.is_finished()

    apply = None  # outlines_core.kernels.torch's apply is a torch.compile kernel: not measured on CPU

    def error(self, kind: str, source) -> str:
        try:
            compiled = self.compile_regex(source) if kind == "regex" else self.compile_schema(source)
        except Exception as error:  # noqa: BLE001 - the text is what is measured
            return f"{type(error).__name__} at compile: {error}"
        return f"compiles without error; {describe_first_mask(self, compiled)}"


def special_ids(tokenizer) -> set[int]:
    """The special tokens but EOS."""
    added = json.loads(tokenizer.to_str())["added_tokens"]
    return {token["id"] for token in added if token["special"] and token["id"] != EOS_ID}


BACKENDS = {"xgrammar": XGrammar, "llguidance": LLGuidance, "outlines_core": OutlinesCore}


# --- measuring --------------------------------------------------------------------------------------


def now() -> float:
    return time.perf_counter()


def percentile(values, fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(values) -> dict:
    return {"median": statistics.median(values), "p90": percentile(values, 0.9), "n": len(values)}


class Masks:
    """A bitmask tensor and the bit tests on it (kept out of the timed regions)."""

    def __init__(self, torch, batch: int):
        self.tensor = torch.zeros((batch, (VOCAB_SIZE + 31) // 32), dtype=torch.int32)
        self.words = self.tensor.numpy()

    def allows(self, row: int, token: int) -> bool:
        return bool((int(self.words[row, token >> 5]) >> (token & 31)) & 1)

    def count(self, row: int) -> int:
        return sum((int(word) & 0xFFFFFFFF).bit_count() for word in self.words[row])

    def clear(self):
        self.tensor.zero_()


def describe_first_mask(backend, compiled) -> str:
    import torch

    masks = Masks(torch, 1)
    matcher = backend.matcher(compiled)
    backend.fill(matcher, masks.tensor, 0)
    text = f"first mask allows {masks.count(0)} tokens (EOS {'allowed' if masks.allows(0, EOS_ID) else 'masked'})"
    if getattr(matcher, "is_error", None) and matcher.is_error():
        text += f"; the matcher is then in error: {matcher.get_error().splitlines()[0]}"
    return text


class Checks:
    """Counts of what the masks got right and wrong over the walks."""

    def __init__(self, never_allowed: list[int]):
        self.never_allowed = never_allowed
        self.counts = {"steps": 0, "document_token_masked": 0, "rejected_by_accept": 0, "eos_allowed_early": 0,
                       "special_allowed": 0, "eos_masked_at_end": 0, "not_accepting_at_end": 0,
                       "continuation_allowed_at_end": 0, "not_finished_after_eos": 0, "documents": 0}
        self.first_failure = ""

    def fail(self, key: str, detail: str):
        self.counts[key] += 1
        if not self.first_failure:
            self.first_failure = f"{key}: {detail}"

    def step(self, masks: Masks, row: int, token: int, position: int):
        self.counts["steps"] += 1
        if not masks.allows(row, token):
            self.fail("document_token_masked", f"token {token} at position {position}")
        if masks.allows(row, EOS_ID):
            self.fail("eos_allowed_early", f"position {position}")
        if any(masks.allows(row, special) for special in self.never_allowed):
            self.fail("special_allowed", f"position {position}")

    def end(self, backend, matcher, masks: Masks, row: int, continuation: int):
        """After the last token of a document: EOS allowed, nothing more, accepting, then finished."""
        self.counts["documents"] += 1
        masks.clear()
        backend.fill(matcher, masks.tensor, row)
        if not masks.allows(row, EOS_ID):
            self.fail("eos_masked_at_end", "")
        if masks.allows(row, continuation):
            self.fail("continuation_allowed_at_end", "")
        if not backend.is_accepting(matcher):
            self.fail("not_accepting_at_end", "")
        if not backend.accept(matcher, EOS_ID) or not backend.is_finished(matcher):
            self.fail("not_finished_after_eos", "")


def walk_one(backend, compiled, tokens: list[int], masks: Masks, checks: Checks, continuation: int,
             fill_times: list, accept_times: list):
    """One matcher through one document at batch 1, timing each mask fill and each accept."""
    matcher = backend.matcher(compiled)
    for position, token in enumerate(tokens):
        masks.clear()
        started = now()
        backend.fill(matcher, masks.tensor, 0)
        fill_times.append(now() - started)
        checks.step(masks, 0, token, position)
        started = now()
        accepted = backend.accept(matcher, token)
        accept_times.append(now() - started)
        if not accepted:
            checks.fail("rejected_by_accept", f"token {token} at position {position}")
            return
    checks.end(backend, matcher, masks, 0, continuation)


def walk_batch(backend, compiled, docs: list[list[int]], masks: Masks, checks: Checks, continuation: int,
               use_batch_api: bool) -> dict:
    """len(docs) matchers stepping together; steps are timed while every row is still in its document."""
    matchers = [backend.matcher(compiled) for _ in docs]
    steps = min(len(doc) for doc in docs)
    fills, accepts = [], []
    for position in range(steps):
        tokens = [doc[position] for doc in docs]
        masks.clear()
        started = now()
        if use_batch_api:
            backend.fill_batch(matchers, masks.tensor)
        else:
            for row, matcher in enumerate(matchers):
                backend.fill(matcher, masks.tensor, row)
        fills.append(now() - started)
        for row, token in enumerate(tokens):
            checks.step(masks, row, token, position)
        started = now()
        if use_batch_api:
            results = backend.accept_batch(matchers, tokens)
        else:
            results = [backend.accept(matcher, token) for matcher, token in zip(matchers, tokens)]
        accepts.append((now() - started) / len(docs))
        if not all(results):
            checks.fail("rejected_by_accept", f"at batch position {position}")
            return {}
    for row, (matcher, doc) in enumerate(zip(matchers, docs)):  # the rows' tails: checked, not timed
        for position in range(steps, len(doc)):
            masks.clear()
            backend.fill(matcher, masks.tensor, row)
            checks.step(masks, row, doc[position], position)
            if not backend.accept(matcher, doc[position]):
                checks.fail("rejected_by_accept", f"row {row} position {position}")
                break
        else:
            checks.end(backend, matcher, masks, row, continuation)
    return {"fill": summary(fills), "accept_per_row": summary(accepts), "steps": steps}


def refusal(backend, compiled, tokens: list[int], masks: Masks, tokenizer) -> str:
    """Where the masks (or the accept) refuse the document, EOS at its end included; "" if nowhere."""
    matcher = backend.matcher(compiled)
    for position, token in enumerate(tokens + [EOS_ID]):
        masks.clear()
        backend.fill(matcher, masks.tensor, 0)
        if not masks.allows(0, token) or not backend.accept(matcher, token):
            if token == EOS_ID:
                return "at EOS"
            return f"at {tokenizer.decode(tokens[max(0, position - 3):position])!r}+{tokenizer.decode([token])!r}"
    return ""


def time_apply(torch, function, batch: int, bitmask, repeats: int) -> dict:
    logits = torch.randn(batch, VOCAB_SIZE, dtype=torch.float32)
    times = []
    for _ in range(repeats):
        started = now()
        function(logits, bitmask)
        times.append(now() - started)
    return summary(times)


def torch_masked_fill(torch):
    shifts = torch.arange(32, dtype=torch.int32)

    def apply(logits, bitmask):
        allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).view(bitmask.shape[0], -1)[:, : logits.shape[1]]
        logits.masked_fill_(allowed == 0, float("-inf"))

    return apply


def longest_gil_stall(function) -> tuple[float, float]:
    """Run ``function`` in a thread; the longest gap seen by this thread meanwhile, and its run time."""
    done = threading.Event()
    took = []

    def target():
        started = now()
        function()
        took.append(now() - started)
        done.set()

    worker = threading.Thread(target=target)
    last = now()
    longest = 0.0
    worker.start()
    while not done.is_set():
        current = now()
        longest = max(longest, current - last)
        last = current
    worker.join()
    return longest, took[0]


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def two_threads(function_a, function_b) -> float:
    started = now()
    threads = [threading.Thread(target=function_a), threading.Thread(target=function_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return now() - started


def requirements(distribution: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, requires, version

    found = []
    for line in requires(distribution) or []:
        if "extra ==" in line:
            continue
        name = line.split(";")[0].strip()
        bare = name
        for separator in "<>=!~[ (":
            bare = bare.split(separator)[0]
        try:
            state = version(bare)
        except PackageNotFoundError:
            state = "absent"
        marker = line.split(";")[1].strip() if ";" in line else ""
        found.append(f"{name} ({state}{'; ' + marker if marker else ''})")
    return found


def child(library: str, args) -> dict:
    from importlib.metadata import version

    started = now()
    __import__(library)
    import_seconds = now() - started
    imported_torch = "torch" in sys.modules
    imported_transformers = "transformers" in sys.modules

    import torch

    torch.set_num_threads(args.torch_threads)
    import tercet.formats.default_model
    import tercet.tokenizer.loading

    tokenizer = tercet.tokenizer.loading.load_tokenizer(str(tercet.formats.default_model.find_default_gguf())).backend_tokenizer
    assert tokenizer.get_vocab_size(with_added_tokens=True) == VOCAB_SIZE
    result = {"library": library, "version": version(DISTRIBUTIONS[library]), "import_s": import_seconds,
              "imports_torch": imported_torch, "imports_transformers": imported_transformers,
              "requires": requirements(DISTRIBUTIONS[library]), "torch_threads": torch.get_num_threads(),
              "settings": {"batch": args.batch, "threads": args.threads, "docs_b1": args.docs_b1}}

    result["load_average_start"] = os.getloadavg()[0]
    result["rss_before_mb"] = peak_rss_mb()
    started = now()
    backend = BACKENDS[library](tokenizer, args.threads)
    result["tokenizer_info_s"] = now() - started

    masks1 = Masks(torch, 1)
    started = now()
    product = backend.compile_schema(PRODUCT_SCHEMA)
    result["compile_cold_s"] = now() - started
    first = backend.matcher(product)
    started = now()
    backend.fill(first, masks1.tensor, 0)
    result["first_mask_s"] = now() - started
    started = now()
    person = backend.compile_schema(PERSON_SCHEMA)
    result["compile_warm_s"] = now() - started
    started = now()
    date = backend.compile_regex(DATE_REGEX)
    result["compile_regex_s"] = now() - started
    started = now()
    any_object = backend.compile_json_object()
    result["compile_json_object_s"] = now() - started
    creations = []
    for _ in range(20):
        started = now()
        backend.matcher(product)
        creations.append(now() - started)
    result["new_matcher_s"] = statistics.median(creations)
    if backend.constructed_matcher is not None:
        constructions = []
        for _ in range(20):
            started = now()
            backend.constructed_matcher(product)
            constructions.append(now() - started)
        result["constructed_matcher_s"] = statistics.median(constructions)
    result["rss_after_compiles_mb"] = peak_rss_mb()

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    never_allowed = [index for index in range(17) if index != EOS_ID]  # the special tokens
    continuation = tokenizer.token_to_id(",")
    checks = Checks(never_allowed)
    # Step 0 of the product schema: only "{" (or whitespace) may start the document.
    masks1.clear()
    backend.fill(backend.matcher(product), masks1.tensor, 0)
    breakers = {text: tokenizer.token_to_id(text) for text in ("[", "}", "a", "1", '"')}
    result["first_step_allowed_tokens"] = masks1.count(0)
    result["first_step_breakers_allowed"] = [text for text, token in breakers.items() if masks1.allows(0, token)]

    product_docs = [encode(text) for text in documents(PRODUCT_SCHEMA, args.batch + args.docs_b1, args.seed)]
    result["document_tokens"] = summary([len(doc) for doc in product_docs])
    fills, accepts = [], []
    for doc in product_docs[: args.docs_b1]:
        walk_one(backend, product, doc, masks1, checks, continuation, fills, accepts)
    result["b1_fill"] = summary(fills)
    result["b1_accept"] = summary(accepts)

    fills_person, unused = [], []
    for doc in [encode(text) for text in documents(PERSON_SCHEMA, 2, args.seed + 1)]:
        walk_one(backend, person, doc, masks1, checks, continuation, fills_person, unused)
    result["b1_fill_person"] = summary(fills_person)
    fills_object = []
    for doc in product_docs[:2]:
        walk_one(backend, any_object, doc, masks1, checks, continuation, fills_object, unused)
    result["b1_fill_json_object"] = summary(fills_object)
    regex_checks = Checks(never_allowed)
    walk_one(backend, date, encode(DATE_REGEX_SAMPLE), masks1, regex_checks, tokenizer.token_to_id("-"), [], [])
    result["regex_checks"] = regex_checks.counts | {"first_failure": regex_checks.first_failure}

    masks_b = Masks(torch, args.batch)
    batch_docs = product_docs[args.docs_b1:]
    result["b32_loop"] = walk_batch(backend, product, batch_docs, masks_b, checks, continuation, False)
    if backend.fill_batch is not None:
        result["b32_batch_api"] = walk_batch(backend, product, batch_docs, masks_b, checks, continuation, True)
    if backend.constructed_matcher is not None:  # the same walk with each row's matcher made anew
        template = backend.matcher
        backend.matcher = backend.constructed_matcher
        result["b32_loop_constructed"] = walk_batch(backend, product, batch_docs, masks_b, checks, continuation, False)
        backend.matcher = template
    if hasattr(backend, "specials_in_string_with_plain_vocab"):
        result["specials_in_string_with_plain_vocab"] = backend.specials_in_string_with_plain_vocab(tokenizer)
    result["checks"] = checks.counts | {"first_failure": checks.first_failure}

    # Apply: a real mask from the middle of a document, at batch 1 and batch B.
    matcher = backend.matcher(product)
    for token in product_docs[0][:20]:
        backend.accept(matcher, token)
    masks1.clear()
    backend.fill(matcher, masks1.tensor, 0)
    wide = masks1.tensor.repeat(args.batch, 1).contiguous()
    masked_fill = torch_masked_fill(torch)
    result["apply_torch_b1"] = time_apply(torch, masked_fill, 1, masks1.tensor, args.apply_repeats)
    result["apply_torch_b32"] = time_apply(torch, masked_fill, args.batch, wide, args.apply_repeats)
    if backend.apply is not None:
        result["apply_native_b1"] = time_apply(torch, backend.apply, 1, masks1.tensor, args.apply_repeats)
        result["apply_native_b32"] = time_apply(torch, backend.apply, args.batch, wide, args.apply_repeats)
    # Both appliers agree with each other and with the bits.
    logits = torch.zeros(1, VOCAB_SIZE)
    masked_fill(logits, masks1.tensor)
    expected = [masks1.allows(0, token) for token in range(VOCAB_SIZE)]
    result["apply_torch_correct"] = [bool(v) for v in torch.isfinite(logits[0]).tolist()] == expected
    if backend.apply is not None:
        logits = torch.zeros(1, VOCAB_SIZE)
        backend.apply(logits, masks1.tensor)
        result["apply_native_correct"] = [bool(v) for v in torch.isfinite(logits[0]).tolist()] == expected

    result["fidelity"] = {label: refusal(backend, product, encode(text), masks1, tokenizer)
                          for label, text in invalid_documents(args.seed)}

    # Compile off the hot path: fresh schemas (renamed properties) so no cache answers.
    stall, took = longest_gil_stall(lambda: backend.compile_schema(schema_variant(PRODUCT_SCHEMA, 1)))
    result["gil_stall_s"], result["gil_stall_compile_s"] = stall, took
    started = now()
    backend.compile_schema(schema_variant(PRODUCT_SCHEMA, 2))
    backend.compile_schema(schema_variant(PERSON_SCHEMA, 3))
    result["two_compiles_sequential_s"] = now() - started
    result["two_compiles_threads_s"] = two_threads(lambda: backend.compile_schema(schema_variant(PRODUCT_SCHEMA, 4)),
                                                   lambda: backend.compile_schema(schema_variant(PERSON_SCHEMA, 5)))

    result["peak_rss_mb"] = peak_rss_mb()
    result["load_average_end"] = os.getloadavg()[0]
    result["errors"] = {
        "malformed schema": backend.error("schema", MALFORMED_SCHEMA),
        "unsatisfiable schema": backend.error("schema", UNSATISFIABLE_SCHEMA),
        "malformed regex": backend.error("regex", MALFORMED_REGEX),
        "unsatisfiable regex": backend.error("regex", UNSATISFIABLE_REGEX),
    }
    return result


# --- the parent: run the children, then print the tables ------------------------------------------------


def run_child(library: str, args) -> dict | None:
    command = [sys.executable, os.path.abspath(__file__), "--child", library, "--batch", str(args.batch),
               "--threads", str(args.threads), "--torch-threads", str(args.torch_threads),
               "--docs-b1", str(args.docs_b1), "--seed", str(args.seed),
               "--apply-repeats", str(args.apply_repeats)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=args.child_timeout)
    if done.returncode != 0:
        print(f"<!-- {library} failed: {done.stderr.strip().splitlines()[-1:] if done.stderr else done.returncode} -->",
              file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def get(result: dict, path: str):
    value = result
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def med(runs: list[dict], path: str):
    values = [get(run, path) for run in runs]
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def spread(runs: list[dict], path: str) -> str:
    values = [get(run, path) for run in runs]
    values = [value for value in values if value is not None]
    if len(values) < 2:
        return "-"
    middle = statistics.median(values)
    return f"{100 * (max(values) - min(values)) / middle:.0f}%" if middle else "-"


def median_p90(runs: list[dict], path: str) -> str:
    return f"{fmt_time(med(runs, path + '.median'))} / {fmt_time(med(runs, path + '.p90'))}"


def refused(where: str) -> str:
    return f"refused {where}".replace("|", "\\|") if where else "**accepted**"


def fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def report(results: dict[str, list[dict]], args) -> str:
    libraries = [library for library in results if results[library]]
    out = [f"# Grammar backends on SmolLM2-135M-Instruct's tokenizer (V={VOCAB_SIZE})", "",
           (f"{args.repeats} runs per library, each in a fresh process, interleaved; figures are the median "
            f"over the runs. Batch {args.batch}, {args.threads} threads for the libraries' thread pools, "
            f"torch threads {results[libraries[0]][0]['torch_threads'] if libraries else '?'}."), ""]
    firsts = {library: results[library][0] for library in libraries}
    for library in libraries:  # a failure in any run shows (the walks are the same in every run)
        for key in firsts[library]["checks"]:
            if key != "first_failure":
                firsts[library]["checks"][key] = max(run["checks"][key] for run in results[library])

    out += ["## Packages", "", table(
        ["library", "version", "declared requirements (installed version)", "imports torch", "imports transformers",
         "import time"],
        [[lib, firsts[lib]["version"], "; ".join(firsts[lib]["requires"]) or "none",
          "yes" if firsts[lib]["imports_torch"] else "no", "yes" if firsts[lib]["imports_transformers"] else "no",
          fmt_time(med(results[lib], "import_s"))] for lib in libraries]), ""]

    tokens = firsts[libraries[0]]["document_tokens"] if libraries else {}
    out += ["## Compile", "",
            ("Product schema (16 properties, nested objects and arrays, enums, patterns, formats, ranges); "
             "person schema of the same size for the warm compile. For llguidance a compile is making the first "
             "matcher from the grammar text; outlines-core's `json_object` is a depth-3 regex approximation."), "",
            table(["library", "tokenizer info", "cold schema compile", "first mask after it", "warm schema compile",
                   "regex compile", "json_object compile", "matcher per request", "llguidance: matcher made anew",
                   "peak RSS after the compiles / at the end"],
                  [[lib] + [fmt_time(med(results[lib], key)) for key in
                            ("tokenizer_info_s", "compile_cold_s", "first_mask_s", "compile_warm_s", "compile_regex_s",
                             "compile_json_object_s", "new_matcher_s", "constructed_matcher_s")]
                   + [f"{med(results[lib], 'rss_after_compiles_mb'):.0f} / {med(results[lib], 'peak_rss_mb'):.0f} MB"]
                   for lib in libraries]), "",
            "Matcher per request: xgrammar `GrammarMatcher(compiled)`, llguidance `deep_copy()` of the grammar's "
            "first matcher, outlines-core `Guide(index)`. RSS includes torch and the tokenizer "
            f"(about {med(results[libraries[0]], 'rss_before_mb'):.0f} MB before the library's tokenizer info)."
            if libraries else "", ""]

    out += ["## Per decoding step", "",
            (f"Documents of the product schema: {tokens.get('median', '?')} tokens median. Batch 1: one matcher "
             f"per document over {args.docs_b1} documents; batch {args.batch}: {args.batch} matchers on "
             f"{args.batch} different documents, timed while all rows are inside their documents. Fill times are "
             "for the whole step (all rows); accept is per row."), "",
            table(["library", "b1 fill median", "b1 fill p90", "b1 accept median",
                   f"b{args.batch} fill, row loop (median / p90)",
                   f"b{args.batch} fill, batch API (median / p90)", f"b{args.batch} accept per row (loop / batch API)",
                   f"llguidance b{args.batch} loop, matchers made anew", "b1 fill, person schema",
                   "b1 fill, json_object"],
                  [[lib, fmt_time(med(results[lib], "b1_fill.median")), fmt_time(med(results[lib], "b1_fill.p90")),
                    fmt_time(med(results[lib], "b1_accept.median")),
                    median_p90(results[lib], "b32_loop.fill"), median_p90(results[lib], "b32_batch_api.fill"),
                    (f"{fmt_time(med(results[lib], 'b32_loop.accept_per_row.median'))} / "
                     f"{fmt_time(med(results[lib], 'b32_batch_api.accept_per_row.median'))}"),
                    median_p90(results[lib], "b32_loop_constructed.fill"),
                    fmt_time(med(results[lib], "b1_fill_person.median")),
                    fmt_time(med(results[lib], "b1_fill_json_object.median"))] for lib in libraries]), ""]

    out += ["## Applying the mask to float32 logits", "",
            ("torch: unpack the bits and `masked_fill_` (the same code for every library, a cross-check of the "
             "noise); native: the library's own CPU apply (xgrammar only: llguidance's and outlines-core's are "
             "torch.compile kernels, not measured)."), "",
            table(["library", "torch b1", f"torch b{args.batch}", "native b1", f"native b{args.batch}",
                   "results agree with the bits"],
                  [[lib, fmt_time(med(results[lib], "apply_torch_b1.median")),
                    fmt_time(med(results[lib], "apply_torch_b32.median")),
                    fmt_time(med(results[lib], "apply_native_b1.median")),
                    fmt_time(med(results[lib], "apply_native_b32.median")),
                    "yes" if all(run.get("apply_torch_correct", True) and run.get("apply_native_correct", True)
                                 for run in results[lib]) else "NO"] for lib in libraries]), ""]

    out += ["## Correctness", "",
            ("Over every walk (batch 1 and batch 32, product, person and json_object): document tokens masked, "
             "EOS allowed before the end, special tokens (ids 0-16 but EOS) allowed, and at each document's end: "
             "EOS masked, ',' still allowed, not accepting, not finished after EOS. All zero is right."), "",
            table(["library", "documents", "steps", "doc token masked", "rejected by accept", "EOS early",
                   "special allowed", "EOS masked at end", "',' allowed at end", "not accepting", "not finished",
                   "step 0: allowed tokens", "step 0: '[' '}' 'a' '1' '\"' allowed", "date regex"],
                  [[lib] + [str(firsts[lib]["checks"][key]) for key in
                            ("documents", "steps", "document_token_masked", "rejected_by_accept", "eos_allowed_early",
                             "special_allowed", "eos_masked_at_end", "continuation_allowed_at_end",
                             "not_accepting_at_end", "not_finished_after_eos")]
                   + [str(firsts[lib]["first_step_allowed_tokens"]),
                      ", ".join(firsts[lib]["first_step_breakers_allowed"]) or "none",
                      "ok" if not any(v for k, v in firsts[lib]["regex_checks"].items()
                                      if k not in ("steps", "documents", "first_failure")) else
                      firsts[lib]["regex_checks"]["first_failure"] or "fail"] for lib in libraries]), ""]
    failures = [f"- {lib}: {firsts[lib]['checks']['first_failure']}" for lib in libraries
                if firsts[lib]["checks"]["first_failure"]]
    for lib in libraries:
        if "specials_in_string_with_plain_vocab" in firsts[lib]:
            allowed = firsts[lib]["specials_in_string_with_plain_vocab"] or "none"
            out += [(f"{lib} with the vocabulary passed as it is (special tokens not blanked): special token ids "
                     f"allowed inside a JSON string: {allowed}."), ""]
    if failures:
        out += ["First failure seen:", *failures, ""]

    labels = list(firsts[libraries[0]]["fidelity"]) if libraries else []
    out += ["## Schema fidelity: is a JSON document that breaks the schema refused?", "",
            table(["invalid document"] + libraries,
                  [[label] + [refused(firsts[lib]["fidelity"][label]) for lib in libraries]
                   for label in labels]), ""]

    out += ["## Compiling off the scheduler's hot path", "",
            ("Longest stall of a Python thread while another thread compiles a fresh product schema (about the "
             "compile time: the GIL is held; a few ms: released), and two fresh compiles in two threads against "
             "one after the other."), "",
            table(["library", "compile in thread", "longest stall of the other thread", "two compiles, sequential",
                   "two compiles, two threads"],
                  [[lib, fmt_time(med(results[lib], "gil_stall_compile_s")), fmt_time(med(results[lib], "gil_stall_s")),
                    fmt_time(med(results[lib], "two_compiles_sequential_s")),
                    fmt_time(med(results[lib], "two_compiles_threads_s"))] for lib in libraries]), ""]

    def cell(text: str) -> str:
        text = " ".join(text.split()).replace("|", "\\|")
        return text if len(text) <= 260 else text[:257] + "..."

    kinds = list(firsts[libraries[0]]["errors"]) if libraries else []
    out += ["## Error text", "",
            (f"Malformed schema `{json.dumps(MALFORMED_SCHEMA)}`; unsatisfiable schema "
             f"`{json.dumps(UNSATISFIABLE_SCHEMA)}`; malformed regex `{MALFORMED_REGEX}`; unsatisfiable regex "
             f"`{UNSATISFIABLE_REGEX}` (matches nothing)."), "",
            table(["library"] + kinds, [[lib] + [cell(firsts[lib]["errors"][kind]) for kind in kinds]
                                        for lib in libraries]), ""]

    keys = [("compile_cold_s", "cold compile"), ("compile_warm_s", "warm compile"), ("b1_fill.median", "b1 fill"),
            ("b32_loop.fill.median", "b32 fill loop"), ("b32_batch_api.fill.median", "b32 fill batch"),
            ("apply_torch_b32.median", "torch apply b32")]
    out += ["## Noise", "", ("(max - min) / median over the runs, per figure; the 1-minute load average at "
                             f"the start and end of the runs (the machine's core count is {os.cpu_count()})."), "",
            table(["library"] + [label for _, label in keys] + ["load average (min-max)"],
                  [[lib] + [spread(results[lib], key) for key, _ in keys]
                   + [(f"{min(r['load_average_start'] for r in results[lib]):.1f}-"
                       f"{max(r['load_average_end'] for r in results[lib]):.1f}")] for lib in libraries]), ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libs", default=",".join(LIBRARIES), help="comma-separated, of: " + ", ".join(LIBRARIES))
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per library")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="threads for the libraries' pools")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads for applying masks (2 on a shared 2-core machine waits on the "
                             "busy core: 30 ms where 1 thread takes 2)")
    parser.add_argument("--docs-b1", type=int, default=4, help="documents walked at batch 1")
    parser.add_argument("--apply-repeats", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child-timeout", type=float, default=600)
    parser.add_argument("--json", help="also write every run's raw figures here")
    parser.add_argument("--from-json", help="print the tables of an earlier --json file instead of measuring")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(child(args.child, args)))
        return

    if args.from_json:
        with open(args.from_json) as handle:
            results = json.load(handle)
        args.repeats = max((len(runs) for runs in results.values()), default=0)
        for runs in results.values():  # the settings the runs had (files from before they were kept: the flags)
            vars(args).update(runs[0].get("settings", {}) if runs else {})
        print(report(results, args))
        return

    libraries = []
    for library in args.libs.split(","):
        probe = subprocess.run([sys.executable, "-c", f"import {library}"], check=False, capture_output=True)
        if probe.returncode == 0:
            libraries.append(library)
        else:
            print(f"<!-- {library}: not importable, skipped -->", file=sys.stderr)
    results: dict[str, list[dict]] = {library: [] for library in libraries}
    for run in range(args.repeats):
        for library in libraries:
            started = now()
            outcome = run_child(library, args)
            print(f"<!-- run {run + 1}/{args.repeats} {library}: {now() - started:.1f} s -->", file=sys.stderr)
            if outcome is not None:
                results[library].append(outcome)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    print(report(results, args))


if __name__ == "__main__":
    main()
