"""Checking a decoded message's fields against its dataclass annotations.

A serializer guarantees that bytes become a registered type, not that the
fields hold what the type declares: a forged ``TokenizedGenerateReq`` whose
``sampling_params`` is an int decodes cleanly and would fail deep inside a
handler. Each receiver runs :func:`check_message` on every decoded message, so
a confused message is dropped at the edge and never reaches a handler.

Checks follow the annotations: ``int``/``float``/``str``/``bool``, ``X | None``
and other unions, ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]``, nested
dataclasses (checked the same way) and ``Any`` or unresolvable names (not
checked). A ``float`` field accepts an ``int`` (JSON and msgpack do not keep
``1`` and ``1.0`` apart); an ``int`` field refuses ``bool``. The checker of
each type is built once and cached.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from typing import Any, Callable

logger = logging.getLogger(__name__)

Check = Callable[[Any], "str | None"]  # None when the value fits, else what is wrong


class MalformedMessageError(TypeError):
    """A decoded message whose fields do not hold the types its class declares."""


def check_message(message) -> None:
    """Raise :class:`MalformedMessageError` naming the first field that does not fit."""
    problem = _dataclass_check(type(message))(message)
    if problem is not None:
        raise MalformedMessageError(f"{type(message).__name__}{problem}")


_DATACLASS_CHECKS: dict[type, Check] = {}


def _dataclass_check(cls: type) -> Check:
    check = _DATACLASS_CHECKS.get(cls)
    if check is None:
        # Placeholder first, so a self-referencing dataclass terminates.
        _DATACLASS_CHECKS[cls] = lambda value: None
        check = _DATACLASS_CHECKS[cls] = _build_dataclass_check(cls)
    return check


def _build_dataclass_check(cls: type) -> Check:
    try:
        hints = typing.get_type_hints(cls)
    except Exception as error:  # a plugin type whose annotations cannot be resolved here
        logger.warning("fields of %s are not type-checked on receipt: %s", cls.__name__, error)
        hints = {}
    field_checks = [(f.name, _check_for(hints.get(f.name, Any))) for f in dataclasses.fields(cls)]

    def check(value) -> str | None:
        if type(value) is not cls:
            if isinstance(value, cls):  # a refined (plugin) subclass: checked by its own fields
                return _dataclass_check(type(value))(value)
            return f": expected {cls.__name__}, got {type(value).__name__}"
        for name, field_check in field_checks:
            problem = field_check(getattr(value, name))
            if problem is not None:
                return f".{name}{problem}"
        return None

    return check


def _check_for(hint) -> Check:
    if hint is Any or isinstance(hint, (str, typing.TypeVar)):
        return _anything
    if hint is None or hint is type(None):
        return _exact(type(None))
    origin = typing.get_origin(hint)
    if origin is not None:
        return _generic_check(origin, hint)
    if dataclasses.is_dataclass(hint):
        return lambda value: _dataclass_check(hint)(value)
    if hint in _SCALAR_CHECKS:
        return _SCALAR_CHECKS[hint]
    if hint in (str, bool, bytes):
        return _exact(hint)
    return _instance(hint) if isinstance(hint, type) else _anything


def _generic_check(origin, hint) -> Check:
    if origin in (typing.Union, types.UnionType):
        return _union([_check_for(argument) for argument in typing.get_args(hint)], hint)
    if origin in (list, tuple, dict, set, frozenset):
        return _container(origin, typing.get_args(hint))
    return _anything  # Literal, Callable and other forms: not checked


def _anything(value) -> None:
    return None


def _with_exact_types(check: Check, exact_types) -> Check:
    # Values whose type is one of these pass: containers test their items with
    # one ``type(item) in ...`` each instead of a call (batches are long lists).
    check.exact_types = frozenset(exact_types)
    return check


def _exact(kind: type) -> Check:
    def check(value):
        return None if type(value) is kind else f": expected {kind.__name__}, got {type(value).__name__}"

    return _with_exact_types(check, [kind])


def _instance(kind: type) -> Check:
    def check(value):
        return None if isinstance(value, kind) else f": expected {kind.__name__}, got {type(value).__name__}"

    return check


def _integer(value) -> str | None:
    return None if type(value) is int else f": expected int, got {type(value).__name__}"


def _number(value) -> str | None:
    return None if type(value) in (float, int) else f": expected a number, got {type(value).__name__}"


_with_exact_types(_integer, [int])
_with_exact_types(_number, [float, int])
_SCALAR_CHECKS: dict[type, Check] = {float: _number, int: _integer}


def _union(checks: list[Check], hint) -> Check:
    def check(value):
        if any(option(value) is None for option in checks):
            return None
        return f": expected {_describe(hint)}, got {type(value).__name__}"

    if all(hasattr(option, "exact_types") for option in checks):
        return _with_exact_types(check, [kind for option in checks for kind in option.exact_types])
    # Optional[Dataclass] and the like: None passes at once, the rest is checked in full.
    exact = [kind for option in checks for kind in getattr(option, "exact_types", ())]
    if exact:
        full = check

        def check(value):
            return None if type(value) in exact else full(value)

    return check


def _container(origin: type, arguments: tuple) -> Check:
    if origin is dict:
        key_check, value_check = (_check_for(arguments[0]), _check_for(arguments[1])) if arguments else (None, None)
        return _mapping(key_check, value_check)
    if origin is tuple and arguments and arguments[-1] is not Ellipsis:
        return _fixed_tuple([_check_for(argument) for argument in arguments])
    item_check = _check_for(arguments[0]) if arguments else _anything
    # Sequences arrive as lists from msgpack whatever the annotation says.
    accepted = (list, tuple) if origin in (list, tuple) else (origin, list)
    return _sequence(origin.__name__, accepted, item_check)


def _sequence(type_name: str, accepted: tuple[type, ...], item_check: Check) -> Check:
    exact_types = getattr(item_check, "exact_types", None)
    only_type = next(iter(exact_types)) if exact_types is not None and len(exact_types) == 1 else None

    def items_pass_at_once(value) -> bool:
        if only_type is not None:  # token ids: the hot case
            return all(type(item) is only_type for item in value)
        return exact_types is not None and all(type(item) in exact_types for item in value)

    def check(value):
        if not isinstance(value, accepted):
            return f": expected {type_name}, got {type(value).__name__}"
        if item_check is _anything or items_pass_at_once(value):
            return None
        for position, item in enumerate(value):
            problem = item_check(item)
            if problem is not None:
                return f"[{position}]{problem}"
        return None

    return check


def _fixed_tuple(item_checks: list[Check]) -> Check:
    def check(value):
        if not isinstance(value, (list, tuple)) or len(value) != len(item_checks):
            return f": expected {len(item_checks)} items, got {type(value).__name__}"
        for position, (item, item_check) in enumerate(zip(value, item_checks)):
            problem = item_check(item)
            if problem is not None:
                return f"[{position}]{problem}"
        return None

    return check


def _mapping(key_check: Check | None, value_check: Check | None) -> Check:
    def check(value):
        if not isinstance(value, dict):
            return f": expected dict, got {type(value).__name__}"
        if key_check is None:
            return None
        for key, item in value.items():
            problem = key_check(key)
            if problem is not None:
                return f" key {key!r}{problem}"
            problem = value_check(item)
            if problem is not None:
                return f"[{key!r}]{problem}"
        return None

    return check


def _describe(hint) -> str:
    return " | ".join(getattr(argument, "__name__", str(argument)) for argument in typing.get_args(hint))
