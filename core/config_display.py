"""The config as people see it: TOML text (`tercet config show`) and a dict (`/get_server_info`), secrets hidden."""

from __future__ import annotations

import dataclasses
from typing import Any

from tercet.config import SECTIONS, TercetConfig, toml_value


def config_as_toml(config: TercetConfig) -> str:
    lines: list[str] = []
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for declared in dataclasses.fields(SECTIONS[section]):
            value = getattr(getattr(config, section), declared.name)
            if value is None:
                lines.append(f"# {declared.name} = (not set)")
            elif declared.metadata.get("secret"):
                lines.append(f'{declared.name} = "{HIDDEN}"')
            else:
                lines.append(f"{declared.name} = {toml_value(value)}")
        lines.append("")
    if config.disabled_plugins:
        lines.append("[plugins]")
        lines.append(f"disable = {toml_value(list(config.disabled_plugins))}")
        lines.append("")
    for plugin, options in config.plugins.items():
        lines.append(f"[plugins.{plugin}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in options.items())
        lines.append("")
    return "\n".join(lines)


# What a secret's value is shown as, wherever the config is shown.
HIDDEN = "***"


def config_shown(config: TercetConfig) -> dict[str, Any]:
    """The config as a dict, with every secret (the API key, the node secret) hidden."""
    shown = dataclasses.asdict(config)
    for section, section_type in SECTIONS.items():
        for declared in dataclasses.fields(section_type):
            if declared.metadata.get("secret") and shown[section][declared.name] is not None:
                shown[section][declared.name] = HIDDEN
    return shown
