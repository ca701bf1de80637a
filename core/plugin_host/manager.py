"""The plugin manager and the named registries its hooks fill.

Built-in plugins and third-party plugins arrive the same way: through the
``tercet`` entry-point group. Tests build a fresh manager and register inline
plugins with :func:`create_plugin_manager(load_entry_points=False)`.

Loading is loud: a plugin that cannot be imported, a hook implementation
whose name is no hook (a typo such as ``register_scheduling_policy``) or whose
arguments do not match its hook, and a wrapper on a register hook are each a
:class:`~tercet.errors.ConfigError` naming the plugin. Plugins named in
``[plugins] disable`` are never imported.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import pluggy

from tercet.errors import ConfigError
from tercet.plugin_host import hookspecs
from tercet.plugin_host.compatibility import check_api_versions
from tercet.plugin_host.kinds import COMPONENT_KINDS, KINDS_BY_HOOK, KINDS_BY_REGISTRY

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
# Hooks tercet calls implementation by implementation (see collect): a wrapper there would never run.
REGISTER_HOOKS = (*KINDS_BY_HOOK, "register_message_handlers")


def create_plugin_manager(
    load_entry_points: bool = True, extra_plugins=(), disabled: Iterable[str] = ()
) -> pluggy.PluginManager:
    """The plugin manager of one process: entry-point plugins (less the ``disabled``
    ones, which are not even imported) and ``extra_plugins``, every one checked."""
    plugin_manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    plugin_manager.add_hookspecs(hookspecs)
    disabled = list(disabled)
    if disabled:
        unknown = sorted(set(disabled) - set(installed_plugin_names()))
        if unknown:
            raise ConfigError(
                f"plugins.disable names {', '.join(map(repr, unknown))}, which no installed distribution provides; "
                f"installed plugins: {', '.join(sorted(installed_plugin_names()))}"
            )
    for name in disabled:
        plugin_manager.set_blocked(name)
    if load_entry_points:
        register_entry_points(plugin_manager)
    for plugin in extra_plugins:
        _register(plugin_manager, plugin)
    check_plugins(plugin_manager)
    return plugin_manager


def installed_plugin_names() -> list[str]:
    return sorted({entry_point.name for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def register_entry_points(plugin_manager: pluggy.PluginManager) -> None:
    """Register every ``tercet`` entry point not blocked or registered already, each under its name."""
    # importlib.metadata.entry_points() gives each distribution once, the copy that import
    # finds first on sys.path. (pluggy's own loader walks every copy, so a shadowed install,
    # such as a system-wide tercet beneath a venv made with --system-site-packages, would
    # add its plugins too, and those may not even import.)
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if plugin_manager.get_plugin(entry_point.name) is not None or plugin_manager.is_blocked(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
        except Exception as error:
            raise ConfigError(
                f"plugin {entry_point.name!r} ({entry_point.value}) cannot be imported: "
                f"{type(error).__name__}: {error}; disable it with plugins.disable = [{entry_point.name!r}]"
            ) from error
        try:
            plugin_manager.register(plugin, name=entry_point.name)
        except pluggy.PluginValidationError as error:
            raise ConfigError(f"plugin {entry_point.name!r}: {error}") from None


def _register(plugin_manager: pluggy.PluginManager, plugin) -> None:
    try:
        plugin_manager.register(plugin)
    except pluggy.PluginValidationError as error:
        raise ConfigError(f"plugin {_name_of(plugin_manager, plugin)!r}: {error}") from None


def check_plugins(plugin_manager: pluggy.PluginManager) -> None:
    """Refuse what pluggy would let pass silently: an implementation of a hook
    that does not exist, and a wrapper on a register hook."""
    try:
        plugin_manager.check_pending()
    except pluggy.PluginValidationError as error:
        raise ConfigError(
            f"plugin {_name_of(plugin_manager, error.plugin)!r}: {error}; the hooks are: "
            f"{', '.join(sorted(name for name in dir(plugin_manager.hook) if not name.startswith('_')))}"
        ) from None
    for plugin in plugin_manager.get_plugins():
        check_api_versions(_name_of(plugin_manager, plugin), getattr(plugin, "TERCET_API_VERSIONS", None))
    for hook_name in REGISTER_HOOKS:
        for hookimpl in getattr(plugin_manager.hook, hook_name).get_hookimpls():
            if hookimpl.hookwrapper or hookimpl.wrapper:
                raise ConfigError(
                    f"plugin {hookimpl.plugin_name!r}: {hook_name} cannot be a wrapper; "
                    "register implementations instead"
                )


def _name_of(plugin_manager: pluggy.PluginManager, plugin) -> str:
    return plugin_manager.get_name(plugin) or getattr(plugin, "__name__", None) or type(plugin).__name__


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
        return self.registration(name).obj

    def registration(self, name: str) -> Registration:
        """What ``name`` registered and which plugin did; a ConfigError listing the names for an unknown one."""
        try:
            return self.entries[name]
        except KeyError:
            available = ", ".join(sorted(self.entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; available: {available}") from None

    def names(self) -> list[str]:
        return sorted(self.entries)

    def factories(self) -> dict[str, Any]:
        """Every registered implementation by its name, for a part that chooses among them itself."""
        return {name: self.entries[name].obj for name in self.names()}


def collect(plugin_manager: pluggy.PluginManager, hook_name: str, **hook_kwargs) -> NamedRegistry:
    """Call one register-style hook on every plugin, recording who registered what.

    The hook implementations are called one by one (rather than through the
    hook caller) so each registration is attributed to its plugin.
    """
    kind = KINDS_BY_HOOK.get(hook_name)
    registry = NamedRegistry(kind.kind if kind else hook_name)
    registration = kind.registration if kind and kind.registration else _name_and_object
    for hookimpl in reversed(getattr(plugin_manager.hook, hook_name).get_hookimpls()):
        def register(*args, _plugin_name=hookimpl.plugin_name, **kwargs):
            try:
                name, obj = registration(*args, **kwargs)
            except (ConfigError, TypeError) as error:
                raise ConfigError(f"plugin {_plugin_name!r}, {hook_name}: {error}") from None
            registry.add(name, obj, _plugin_name)

        arguments = {"register": register, **hook_kwargs}
        hookimpl.function(**{name: arguments[name] for name in hookimpl.argnames})
    return registry


def _name_and_object(name, obj) -> tuple[str, Any]:
    return name, obj


def collect_pairs(plugin_manager: pluggy.PluginManager, hook_name: str, **hook_kwargs) -> list[tuple]:
    """Call a register-style hook whose registrations are not named (message handlers)."""
    pairs: list[tuple] = []
    for hookimpl in reversed(getattr(plugin_manager.hook, hook_name).get_hookimpls()):
        arguments = {"register": lambda *args: pairs.append(args), **hook_kwargs}
        hookimpl.function(**{name: arguments[name] for name in hookimpl.argnames})
    return pairs


@dataclass(frozen=True)
class PluginRegistries:
    """Every component registry, built once per process: one per entry of the table
    of component kinds, by its ``registry`` name (``registries.scheduling_policies``)."""

    by_name: Mapping[str, NamedRegistry]

    @classmethod
    def from_plugin_manager(cls, plugin_manager: pluggy.PluginManager) -> "PluginRegistries":
        return cls({kind.registry: collect(plugin_manager, kind.hook) for kind in COMPONENT_KINDS})

    def __getattr__(self, name: str) -> NamedRegistry:
        try:
            return self.__dict__["by_name"][name]
        except KeyError:
            raise AttributeError(name) from None

    def chosen(self, registry: str, config) -> Any:
        """The implementation the config names for a kind with a config key
        (None for one of the kind's ``extra_choices``, which name no registration)."""
        registration = self.chosen_registration(registry, config)
        return None if registration is None else registration.obj

    def chosen_registration(self, registry: str, config) -> Registration | None:
        """The registration the config names for a kind with a config key: the
        implementation and its plugin (None for one of the kind's ``extra_choices``)."""
        kind = KINDS_BY_REGISTRY[registry]
        section, key = kind.config_key
        name = getattr(getattr(config, section), key)
        if name in kind.extra_choices:
            return None
        known = self.by_name[registry]
        if name not in known.entries and kind.extra_choices:
            available = ", ".join([*kind.extra_choices, *known.names()])
            raise ConfigError(f"unknown {kind.kind} {name!r} ({section}.{key}); available: {available}")
        return known.registration(name)


def message_handlers(plugin_manager: pluggy.PluginManager, component: str) -> list[tuple[type, Callable]]:
    return collect_pairs(plugin_manager, "register_message_handlers", component=component)
