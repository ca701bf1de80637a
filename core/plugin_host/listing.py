"""What ``tercet plugins`` shows: every plugin, where it comes from, what it provides."""

from __future__ import annotations

import importlib.metadata

import pluggy

from tercet.plugin_host.kinds import COMPONENT_KINDS
from tercet.plugin_host.manager import ENTRY_POINT_GROUP, collect


def describe_plugins(plugin_manager: pluggy.PluginManager) -> list[dict]:
    registered: dict[str, list[dict]] = {}
    for kind in COMPONENT_KINDS:
        for registration in collect(plugin_manager, kind.hook).entries.values():
            item = {"kind": kind.kind, "name": registration.name}
            if kind.shows_availability:
                item["unavailable_reason"] = unavailable_reason(registration.obj)
            registered.setdefault(registration.plugin_name, []).append(item)
    entry_points = {entry_point.name: entry_point for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return [
        _describe(plugin_manager, name, plugin, entry_points.get(name), registered.get(name, []))
        for name, plugin in sorted(plugin_manager.list_name_plugin(), key=lambda pair: pair[0])
    ]


def unavailable_reason(factory) -> str | None:
    """Why a registered implementation cannot run here (None: it can), as its factory says."""
    check = getattr(factory, "unavailable_reason", None)
    if check is None:
        return None
    try:
        return check()
    except Exception as error:  # a broken check must not hide the other plugins from the listing
        return f"its availability check failed: {error!r}"


def _describe(plugin_manager: pluggy.PluginManager, name: str, plugin, entry_point, registers: list[dict]) -> dict:
    # Only a plugin loaded from an entry point comes from a distribution (not an inline one).
    dist = getattr(entry_point, "dist", None)
    origin = {"distribution": dist.metadata["name"] if dist else None, "version": dist.version if dist else None}
    if plugin is None:  # disabled (blocked): never imported, so only its entry point is known
        module = entry_point.value if entry_point else None
        return {"name": name, "module": module, **origin, "disabled": True, "hooks": [], "registers": []}
    return {
        "name": name,
        "module": getattr(plugin, "__name__", type(plugin).__name__),
        **origin,
        "disabled": False,
        "hooks": sorted(caller.name for caller in plugin_manager.get_hookcallers(plugin) or []),
        "registers": registers,
    }


def format_plugins(described: list[dict]) -> str:
    lines = []
    for plugin in described:
        origin = f"{plugin['distribution']} {plugin['version']}" if plugin["distribution"] else "not from a distribution"
        lines.append(f"{plugin['name']}  ({origin}; module {plugin['module']})")
        if plugin["disabled"]:
            lines.append("  disabled (plugins.disable): not loaded")
            continue
        lines.append(f"  hooks: {', '.join(plugin['hooks']) or 'none'}")
        for item in plugin["registers"]:
            lines.append(f"  registers {item['kind']}: {item['name']}{_availability(item)}")
    return "\n".join(lines)


def _availability(item: dict) -> str:
    if "unavailable_reason" not in item:
        return ""
    reason = item["unavailable_reason"]
    return " (available)" if reason is None else f" (unavailable: {reason})"
