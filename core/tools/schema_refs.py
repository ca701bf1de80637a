"""Local ``$ref`` pointers of a JSON Schema, kept pointing at the same place once it is nested.

A tool's ``parameters`` is a schema of its own: pydantic writes a nested model
as ``{"$ref": "#/$defs/Inner"}`` beside a ``$defs`` table, both relative to the
parameters' root. A forced call's schema nests the parameters under
``properties.arguments`` (and under ``anyOf/<i>`` when several tools may be
called), where ``#/$defs/Inner`` would name a table the outer schema does not
have. Rebasing each local pointer onto where the parameters now live keeps
``$defs``, ``definitions``, a recursive ``#`` and any other JSON pointer working.
"""

from __future__ import annotations

# Keywords whose values are data, not schemas: a "$ref" inside them is not a reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def rebase_local_refs(schema, pointer: str):
    """A copy of ``schema`` whose local ``$ref`` values (``#`` and ``#/…``) are prefixed
    with ``pointer``, the JSON pointer of the place it is nested at (``/properties/arguments``)."""
    if isinstance(schema, list):
        return [rebase_local_refs(item, pointer) for item in schema]
    if not isinstance(schema, dict):
        return schema
    rebased = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            rebased[key] = "#" + pointer + value[1:]
        elif key in _DATA_KEYWORDS:
            rebased[key] = value
        else:
            rebased[key] = rebase_local_refs(value, pointer)
    return rebased
