"""Request bodies that follow an OpenAPI schema everywhere but in one place, any place.

A client's mistake is one value where another belongs, at any depth: an object
where a string belongs, a list for an enum, a number for a flag. A parser must
refuse it with a 400 rather than use it (a ``tool_choice.type`` of ``{}`` reached
a dict lookup: a 500). :func:`places` lists every place of a schema of tercet's
OpenAPI document (a path of property names, ``"[]"`` for a list's item, an
index for one of ``oneOf``'s alternatives); :func:`broken_at` draws bodies that
are well formed (:func:`shaped`) except at that one place, which holds any
JSON value. The rest being well formed is what lets the parser read on to the
broken place, however deep: a fuzzer that breaks values at random breaks the
messages long before it reaches a tool choice.
"""

from __future__ import annotations

from hypothesis import strategies as st

SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, width=32) | st.text(max_size=6)
ANY_JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
# Values where others belong, the likeliest first: a scalar of the wrong type, or a list or object (which
# cannot be a dict key: a lookup of one raises TypeError).
WRONG_VALUES = ({}, [], ["auto"], {"a": 1}, None, True, 0, -1, 1.5, "", "x")
MISPLACED = st.sampled_from(WRONG_VALUES) | ANY_JSON
# Past this depth a schema's places are not listed (a schema may refer to itself).
MAX_DEPTH = 8


class Schemas:
    """A document's schemas (``components``), to resolve ``$ref`` and ``oneOf`` with."""

    def __init__(self, components: dict):
        self.components = components

    def resolved(self, schema: dict) -> dict:
        while "$ref" in schema:
            schema = self.components[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def alternatives(self, schema: dict) -> list[dict]:
        """``oneOf``'s (or ``anyOf``'s) alternatives, each with the rest of ``schema``; none without one."""
        schema = self.resolved(schema)
        rest = {key: value for key, value in schema.items() if key not in ("oneOf", "anyOf")}
        return [{**rest, **self.resolved(option)} for option in schema.get("oneOf") or schema.get("anyOf") or ()]


def places(schemas: Schemas, schema: dict, depth: int = 0) -> list[tuple]:
    """Every place a value stands in ``schema``, the whole value (``()``) first."""
    found = [()]
    if depth > MAX_DEPTH:
        return found
    schema = schemas.resolved(schema)
    alternatives = schemas.alternatives(schema)
    for index, alternative in enumerate(alternatives):
        found += [(index, *place) for place in places(schemas, alternative, depth + 1) if place]
    if not alternatives and schema.get("type") == "object":
        for name, sub in schema.get("properties", {}).items():
            found += [(name, *place) for place in places(schemas, sub, depth + 1)]
    if not alternatives and schema.get("type") == "array":
        found += [("[]", *place) for place in places(schemas, schema.get("items", {}), depth + 1)]
    return found


def broken_at(schemas: Schemas, schema: dict, place: tuple) -> st.SearchStrategy:
    """Values of ``schema``, well formed but at ``place``, which holds a misplaced value."""
    if not place:
        return MISPLACED
    head, rest = place[0], place[1:]
    if isinstance(head, int):
        return broken_at(schemas, schemas.alternatives(schema)[head], rest)
    schema = schemas.resolved(schema)
    if head == "[]":
        items = schema.get("items", {})
        around = st.lists(shaped(schemas, items), max_size=1)
        return st.tuples(around, broken_at(schemas, items, rest), around).map(lambda parts: [*parts[0], parts[1],
                                                                                             *parts[2]])
    properties = schema.get("properties", {})
    return _object(schemas, properties, set(schema.get("required", ())), {head: broken_at(schemas, properties[head],
                                                                                          rest)})


def shaped(schemas: Schemas, schema: dict, depth: int = 0) -> st.SearchStrategy:
    """Values of ``schema``, well formed (past ``MAX_DEPTH``: any JSON)."""
    if depth > MAX_DEPTH:
        return ANY_JSON
    schema = schemas.resolved(schema)
    alternatives = schemas.alternatives(schema)
    if alternatives:
        return st.one_of([shaped(schemas, alternative, depth + 1) for alternative in alternatives])
    strategy = _typed(schemas, schema, depth)
    return strategy | st.none() if schema.get("nullable") else strategy


def _typed(schemas: Schemas, schema: dict, depth: int) -> st.SearchStrategy:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        fields = {name: shaped(schemas, sub, depth + 1) for name, sub in schema.get("properties", {}).items()}
        return _object(schemas, schema.get("properties", {}), set(schema.get("required", ())), {}, fields)
    if kind == "array":
        items = shaped(schemas, schema.get("items", {}), depth + 1)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=max(min(schema.get("maxItems", 3), 3),
                                                                                schema.get("minItems", 0)))
    if kind == "integer":  # small numbers: a token count is then quick to serve
        low = max(schema.get("minimum", -5), -5)
        return st.integers(low, min(schema.get("maximum", low + 40), low + 40))
    if kind == "number":
        low = schema.get("minimum", -2.0)
        return st.floats(low, min(schema.get("maximum", low + 4.0), low + 4.0), allow_nan=False)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=8)
    if kind == "boolean":
        return st.booleans()
    return ANY_JSON


def _object(schemas: Schemas, properties: dict, required: set[str], fixed: dict,
            fields: dict | None = None) -> st.SearchStrategy:
    """An object of ``properties``: the ``fixed`` ones always there as given, the required ones always there."""
    if fields is None:
        fields = {name: shaped(schemas, sub) for name, sub in properties.items() if name not in fixed}
    always = {**{name: fields[name] for name in properties if name in required and name not in fixed}, **fixed}
    return st.fixed_dictionaries(always, optional={name: fields[name] for name in properties
                                                   if name not in required and name not in fixed})
