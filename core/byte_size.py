"""Sizes in bytes as people write them: ``536870912``, ``"512MiB"``, ``"1.5 GB"``."""

from __future__ import annotations

import re

from tercet.errors import ConfigError

UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_byte_size(value: int | str, name: str) -> int:
    """The number of bytes ``value`` stands for; a ConfigError naming ``name`` if it is no size."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{name} must not be negative, got {value}")
        return value
    match = _SIZE.match(str(value))
    unit = match and UNITS.get(match.group(2).lower())
    if not match or unit is None:
        raise ConfigError(
            f"{name} must be a number of bytes or a size such as \"512MiB\" or \"2GB\", got {value!r}"
        )
    return int(float(match.group(1)) * unit)


def format_byte_size(num_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:.1f} {unit}"
    return f"{num_bytes} B"
