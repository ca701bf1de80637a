"""What ``tercet plugins`` shows: every plugin, where it comes from, what it provides."""

from __future__ import annotations


import pluggy

from tercet.plugin_manager import COMPONENT_HOOKS, collect


def describe_plugins(plugin_manager: pluggy.PluginManager) -> list[dict]:
    distributions = {id(plugin): dist for plugin, dist in plugin_manager.list_plugin_distinfo()}
    registered: dict[str, list[dict]] = {}
    for hook_name, kind in COMPONENT_HOOKS.items():
        for registration in collect(plugin_manager, hook_name).entries.values():
            registered.setdefault(registration.plugin_name, []).append({"kind": kind, "name": registration.name})

    described = []
    for name, plugin in sorted(plugin_manager.list_name_plugin(), key=lambda pair: pair[0]):
        if plugin is None:  # blocked
            continue
        dist = distributions.get(id(plugin))
        described.append(
            {
                "name": name,
                "module": getattr(plugin, "__name__", type(plugin).__name__),
                "distribution": dist.metadata["name"] if dist else None,
                "version": dist.version if dist else None,
                "hooks": sorted(caller.name for caller in plugin_manager.get_hookcallers(plugin) or []),
                "registers": registered.get(name, []),
            }
        )
    return described


def format_plugins(described: list[dict]) -> str:
    lines = []
    for plugin in described:
        origin = f"{plugin['distribution']} {plugin['version']}" if plugin["distribution"] else "not from a distribution"
        lines.append(f"{plugin['name']}  ({origin}; module {plugin['module']})")
        lines.append(f"  hooks: {', '.join(plugin['hooks']) or 'none'}")
        for item in plugin["registers"]:
            lines.append(f"  registers {item['kind']}: {item['name']}")
    return "\n".join(lines)
