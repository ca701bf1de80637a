"""Configuration: frozen dataclasses resolved from defaults < TOML < environment < command line.

Every key is declared once, in :mod:`tercet.config_sections`, with its type and, where it has them, its
allowed values; an unknown key or a bad value is a ConfigError naming it.
Plugin names (policy, backend, ...) are checked against the installed plugins
separately, by :func:`check_plugin_choices`, since only the plugin manager
knows them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import typing
from typing import Any, Mapping

from tercet.byte_size import parse_byte_size

# The sections, declared in tercet.config_sections; importing them from here works too.
from tercet.config_sections import (  # noqa: F401 (re-exported)
    DTYPE_NAMES,
    AttentionConfig,
    CacheConfig,
    DetokenizerConfig,
    GrammarConfig,
    IpcConfig,
    ModelConfig,
    ParallelConfig,
    ReasoningConfig,
    SchedulerConfig,
    ServerConfig,
    TercetConfig,
    ToolsConfig,
)
from tercet.errors import ConfigError
from tercet.plugin_host.kinds import COMPONENT_KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


SECTIONS: dict[str, type] = {
    f.name: f.default_factory for f in dataclasses.fields(TercetConfig) if f.name not in ("plugins", "disabled_plugins")
}
# Environment variables under the TERCET_ prefix that are not config keys.
NON_CONFIG_ENVIRONMENT = {"TERCET_CACHE_DIR", "TERCET_CONFIG"}


def load_config(
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> TercetConfig:
    """Resolve the config; ``overrides`` are command-line values, highest precedence."""
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get("TERCET_CONFIG")
    layers = []
    if config_file:
        layers.append(("config file " + config_file, read_toml(config_file), False))
    layers.append(("environment", values_from_environment(environ), True))
    layers.append(("command line", overrides or {}, True))

    merged: dict[str, dict[str, Any]] = {}
    plugin_options: dict[str, dict[str, Any]] = {}
    disabled_plugins: tuple[str, ...] = ()
    for origin, layer, values_are_text in layers:
        for section, values in layer.items():
            if section != "plugins":
                merged.setdefault(section, {}).update(_section_values(section, values, origin, values_are_text))
                continue
            disabled = _read_plugins_table(values, origin, plugin_options)
            if disabled is not None:
                disabled_plugins = disabled
    sections = {name: SECTIONS[name](**merged.get(name, {})) for name in SECTIONS}
    return TercetConfig(**sections, plugins=plugin_options, disabled_plugins=disabled_plugins)


def _read_plugins_table(values: Any, origin: str, plugin_options: dict) -> tuple[str, ...] | None:
    """Merge ``[plugins.<name>]`` options into ``plugin_options``; ``[plugins] disable`` if this layer sets it."""
    disabled = None
    if isinstance(values, Mapping) and "disable" in values:
        values = dict(values)
        disabled = _disabled_plugins(values.pop("disable"), origin)
    _merge_plugin_options(plugin_options, values, origin)
    return disabled


def _section_values(section: str, values: Any, origin: str, values_are_text: bool) -> dict[str, Any]:
    """One layer's values for ``[section]``, each checked against its declared field."""
    section_type = _section_type(section, origin)
    if not isinstance(values, Mapping):
        raise ConfigError(f"{origin}: [{section}] must be a table")
    checked = {}
    for key, value in values.items():
        declared = _declared_field(section_type, section, key, origin)
        if declared.metadata.get("refuses_placeholders"):
            # Before text parsing, which reads "" and "none" as "unset".
            check_api_key(value, _where(origin, section, key))
        if values_are_text and isinstance(value, str):
            value = parse_text_value(declared, section, key, value, origin)
        checked[key] = _checked(declared, section, key, value, origin)
    return checked


def _disabled_plugins(value: Any, origin: str) -> tuple[str, ...]:
    """``[plugins] disable``: a list of plugin names in TOML, comma-separated text elsewhere."""
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    if isinstance(value, list) and all(isinstance(name, str) and name for name in value):
        return tuple(value)
    raise ConfigError(f"{origin}: plugins.disable must be a list of plugin names, got {value!r}")


# Values that say "no key" rather than being one: a shell variable that was
# never set ("$KEY" expands to ""), or a templating tool's rendering of nothing.
PLACEHOLDER_API_KEYS = {"", "none", "null"}


def check_api_key(value: Any, where: str) -> None:
    """An empty or placeholder key is an error, never "no authentication": with
    ``--api-key "$KEY"`` and KEY unset, the server would serve everyone. A key
    with whitespace around it is an error too: it would lock everyone out."""
    if isinstance(value, str) and value.strip().lower() in PLACEHOLDER_API_KEYS:
        raise ConfigError(
            f"{where} is {value!r}, which would turn authentication off; give a real key, "
            "or leave it out to serve without one"
        )
    # A client cannot send them: HTTP drops the spaces around a header's value, so
    # such a key would start a server that answers every request with a 401.
    if isinstance(value, str) and value != value.strip():
        raise ConfigError(
            f"{where} has whitespace around it ({len(value) - len(value.lstrip())} leading, "
            f"{len(value) - len(value.rstrip())} trailing), which no client can send in an Authorization "
            "header; give the key without it"
        )


def read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None


def values_from_environment(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``TERCET_<SECTION>_<KEY>=value``, e.g. ``TERCET_SERVER_PORT=8000``."""
    values: dict[str, dict[str, str]] = {}
    for name, value in environ.items():
        if not name.startswith("TERCET_") or name in NON_CONFIG_ENVIRONMENT:
            continue
        if name == "TERCET_PLUGINS_DISABLE":
            values["plugins"] = {"disable": value}
            continue
        section, _, key = name[len("TERCET_"):].lower().partition("_")
        # Only variables naming one of our sections are config; other TERCET_*
        # names may belong to plugins or scripts. A bad key in a known section is an error.
        if section in SECTIONS:
            values.setdefault(section, {})[key] = value
    return values


def parse_set_options(assignments: list[str]) -> dict[str, dict[str, Any]]:
    """``--set section.key=value`` (or ``plugins.<name>.key=value``, or
    ``plugins.disable=a,b``) into nested dicts."""
    values: dict[str, dict[str, Any]] = {}
    for assignment in assignments:
        dotted, equals, value = assignment.partition("=")
        parts = dotted.strip().split(".")
        if not equals or len(parts) < 2 or not all(parts):
            raise ConfigError(f"--set expects section.key=value, got {assignment!r}")
        if parts == ["plugins", "disable"]:
            values.setdefault("plugins", {})["disable"] = value
        elif parts[0] == "plugins":
            if len(parts) != 3:
                raise ConfigError(f"--set expects plugins.<name>.key=value, got {assignment!r}")
            values.setdefault("plugins", {}).setdefault(parts[1], {})[parts[2]] = _guess_text_value(value)
        elif len(parts) == 2:
            values.setdefault(parts[0], {})[parts[1]] = value
        else:
            raise ConfigError(f"--set expects section.key=value, got {assignment!r}")
    return values


def parse_text_value(declared: dataclasses.Field, section: str, key: str, text: str, origin: str) -> Any:
    kind = _base_type(declared)
    text = text.strip()
    if _is_optional(declared) and text.lower() in ("", "none", "null"):
        return None
    parse = TEXT_PARSERS.get(kind)
    if parse is None:
        return text
    try:
        return parse(text)
    except ValueError:
        raise ConfigError(f"{origin}: {section}.{key} must be {TYPE_NAMES[kind]}, got {text!r}") from None


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


TEXT_PARSERS = {
    bool: _parse_bool,
    int: int,
    float: float,
    # A list of strings: comma-separated on the command line and in the environment.
    tuple: lambda text: tuple(item.strip() for item in text.split(",") if item.strip()),
}


def check_plugin_choices(config: TercetConfig, registries) -> None:
    """Fail early, naming the available implementations, for an unknown plugin name."""
    for kind in COMPONENT_KINDS:
        if kind.config_key is not None:
            registries.chosen(kind.registry, config)


def toml_value(value: Any) -> str:
    """``value`` written as TOML (config errors and `tercet config show` quote values this way)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def _guess_text_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _merge_plugin_options(target: dict, values: Any, origin: str) -> None:
    if not isinstance(values, Mapping) or not all(isinstance(v, Mapping) for v in values.values()):
        raise ConfigError(f"{origin}: [plugins] must hold one table per plugin, [plugins.<name>]")
    for plugin, options in values.items():
        target.setdefault(plugin, {}).update(options)


def _where(origin: str, section: str, key: str) -> str:
    """Where a value came from, as the user wrote it there."""
    if origin == "environment":
        return f"environment: TERCET_{section.upper()}_{key.upper()}"
    return f"{origin}: {section}.{key}"


def _section_type(section: str, origin: str) -> type:
    try:
        return SECTIONS[section]
    except KeyError:
        allowed = ", ".join([*SECTIONS, "plugins"])
        raise ConfigError(f"{origin}: unknown section [{section}]; allowed: {allowed}") from None


def _declared_field(section_type: type, section: str, key: str, origin: str) -> dataclasses.Field:
    fields_by_name = {f.name: f for f in dataclasses.fields(section_type)}
    if key not in fields_by_name:
        allowed = ", ".join(fields_by_name)
        raise ConfigError(f"{origin}: unknown key {section}.{key}; allowed in [{section}]: {allowed}")
    return fields_by_name[key]


def _checked(declared: dataclasses.Field, section: str, key: str, value: Any, origin: str) -> Any:
    name = f"{origin}: {section}.{key}"
    if value is None and _is_optional(declared):
        return None
    value = _as_declared_type(declared, value, name)
    choices = declared.metadata.get("choices")
    if choices and value not in choices:
        allowed = ", ".join(toml_value(c) for c in choices)
        raise ConfigError(f"{name} = {toml_value(value)} is not allowed; allowed: {allowed}")
    _check_bounds(declared.metadata, value, name)
    return value


def _as_declared_type(declared: dataclasses.Field, value: Any, name: str) -> Any:
    """``value`` as the field's type (an integer where a number is declared becomes a float), or a ConfigError."""
    kind = _base_type(declared)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if declared.metadata.get("byte_size"):
        value = _byte_size_text(value, name)
    if kind is tuple:
        return _list_value(declared, value, name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{name} must be {TYPE_NAMES[kind]}, got {value!r}")
    return value


def _string_list(value: Any, name: str, items: tuple[str, str] | None) -> tuple[str, ...]:
    """``value`` as a tuple of strings, each matching ``items`` (a pattern and what it means) when given."""
    if not (isinstance(value, (list, tuple)) and all(isinstance(item, str) and item.strip() for item in value)):
        raise ConfigError(f"{name} must be {TYPE_NAMES[tuple]}, got {value!r}")
    value = tuple(item.strip() for item in value)
    if items is not None:
        pattern, meaning = items
        for item in value:
            if not re.fullmatch(pattern, item):
                raise ConfigError(f"{name}: {item!r} is not {meaning}")
    return value


def _list_value(declared: dataclasses.Field, value: Any, name: str) -> tuple[str, ...]:
    """A list key's value; a ``table`` key also takes a TOML table, and names each item once."""
    if not declared.metadata.get("table"):
        return _string_list(value, name, declared.metadata.get("items"))
    if isinstance(value, dict):
        value = _table_as_items(value, name)
    return _unique_names(_string_list(value, name, declared.metadata.get("items")), name)


def _table_as_items(table: dict, name: str) -> list[str]:
    """A TOML table ``{ NAME = "PATH" }`` as the ``NAME=PATH`` items the key holds."""
    if not all(isinstance(value, str) for value in table.values()):
        raise ConfigError(f"{name} must map names to path strings, got {table!r}")
    return [f"{key}={value}" for key, value in table.items()]


def _unique_names(items: tuple[str, ...], name: str) -> tuple[str, ...]:
    """A ``NAME=VALUE`` list names each once: a name given twice is an error, never one silently winning."""
    names = [item.split("=", 1)[0] for item in items]
    twice = sorted({item for item in names if names.count(item) > 1})
    if twice:
        raise ConfigError(f"{name}: {', '.join(twice)} given more than once")
    return items


def _byte_size_text(value: Any, name: str) -> Any:
    """An integer of bytes or a size string, kept as written (an integer as its text), checked here."""
    value = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(value, str):
        parse_byte_size(value, name)
    return value


def _check_bounds(metadata: Mapping[str, Any], value: Any, name: str) -> None:
    if "min" in metadata and value < metadata["min"]:
        raise ConfigError(f"{name} must be at least {metadata['min']}, got {value!r}")
    if "max" in metadata and value > metadata["max"]:
        raise ConfigError(f"{name} must be at most {metadata['max']}, got {value!r}")


TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
              tuple: "a list of non-empty strings"}
_TYPE_HINTS: dict[type, dict[str, Any]] = {}


def _hint(declared: dataclasses.Field) -> Any:
    for section_type in SECTIONS.values():
        if declared in dataclasses.fields(section_type):
            if section_type not in _TYPE_HINTS:
                _TYPE_HINTS[section_type] = typing.get_type_hints(section_type)
            return _TYPE_HINTS[section_type][declared.name]
    raise KeyError(declared.name)


def _is_optional(declared: dataclasses.Field) -> bool:
    return type(None) in typing.get_args(_hint(declared))


def _base_type(declared: dataclasses.Field) -> type:
    hint = _hint(declared)
    if typing.get_origin(hint) is tuple:  # tuple[str, ...]: the one kind of list a section declares
        return tuple
    arguments = [a for a in typing.get_args(hint) if a is not type(None)]
    return arguments[0] if arguments else hint
