"""The plugin manager and the named registries its hooks fill.

Built-in plugins and third-party plugins arrive the same way: through the
``tercet`` entry-point group. Tests build a fresh manager and register inline
plugins with :func:`create_plugin_manager(load_entry_points=False)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pluggy

from tercet import hookspecs
from tercet.errors import ConfigError

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME

# Component hook name -> the kind of thing it registers, as users see it.
COMPONENT_HOOKS = {
    "register_serializers": "serializer",
    "register_transports": "transport",
    "register_scheduling_policies": "scheduling policy",
    "register_detokenizers": "detokenizer",
    "register_attention_backends": "attention backend",
    "register_message_types": "message type",
}


def create_plugin_manager(load_entry_points: bool = True, extra_plugins=()) -> pluggy.PluginManager:
    plugin_manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    plugin_manager.add_hookspecs(hookspecs)
    if load_entry_points:
        plugin_manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in extra_plugins:
        plugin_manager.register(plugin)
    return plugin_manager


@dataclass(frozen=True)
class Registration:
    name: str
    obj: Any
    plugin_name: str


@dataclass
class NamedRegistry:
    """Named implementations of one kind, with the plugin that provided each."""

    kind: str
    entries: dict[str, Registration] = field(default_factory=dict)

    def add(self, name: str, obj: Any, plugin_name: str) -> None:
        if name in self.entries:
            previous = self.entries[name].plugin_name
            raise ConfigError(
                f"{self.kind} {name!r} is registered twice: by {previous!r} and by {plugin_name!r}"
            )
        self.entries[name] = Registration(name, obj, plugin_name)

    def get(self, name: str) -> Any:
        try:
            return self.entries[name].obj
        except KeyError:
            available = ", ".join(sorted(self.entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; available: {available}") from None

    def names(self) -> list[str]:
        return sorted(self.entries)


def collect(plugin_manager: pluggy.PluginManager, hook_name: str, **hook_kwargs) -> NamedRegistry:
    """Call one register-style hook on every plugin, recording who registered what.

    The hook implementations are called one by one (rather than through the
    hook caller) so each registration is attributed to its plugin.
    """
    registry = NamedRegistry(COMPONENT_HOOKS.get(hook_name, hook_name))
    for hookimpl in reversed(getattr(plugin_manager.hook, hook_name).get_hookimpls()):
        def register(name, obj, _plugin_name=hookimpl.plugin_name):
            registry.add(name, obj, _plugin_name)

        arguments = {"register": register, **hook_kwargs}
        hookimpl.function(**{name: arguments[name] for name in hookimpl.argnames})
    return registry


def collect_pairs(plugin_manager: pluggy.PluginManager, hook_name: str, **hook_kwargs) -> list[tuple]:
    """Call a register-style hook whose registrations are not named (handlers, routes)."""
    pairs: list[tuple] = []
    for hookimpl in reversed(getattr(plugin_manager.hook, hook_name).get_hookimpls()):
        arguments = {"register": lambda *args: pairs.append(args), **hook_kwargs}
        hookimpl.function(**{name: arguments[name] for name in hookimpl.argnames})
    return pairs


@dataclass(frozen=True)
class PluginRegistries:
    """Every component registry, built once per process."""

    serializers: NamedRegistry
    transports: NamedRegistry
    scheduling_policies: NamedRegistry
    detokenizers: NamedRegistry
    attention_backends: NamedRegistry
    message_types: NamedRegistry

    @classmethod
    def from_plugin_manager(cls, plugin_manager: pluggy.PluginManager) -> "PluginRegistries":
        return cls(
            serializers=collect(plugin_manager, "register_serializers"),
            transports=collect(plugin_manager, "register_transports"),
            scheduling_policies=collect(plugin_manager, "register_scheduling_policies"),
            detokenizers=collect(plugin_manager, "register_detokenizers"),
            attention_backends=collect(plugin_manager, "register_attention_backends"),
            message_types=collect(plugin_manager, "register_message_types"),
        )


def message_handlers(plugin_manager: pluggy.PluginManager, component: str) -> list[tuple[type, Callable]]:
    return collect_pairs(plugin_manager, "register_message_handlers", component=component)
