"""Plugin discovery and registries, with a fresh plugin manager and inline plugins."""

import pytest

from tercet.errors import ConfigError
from tercet.hookspecs import hookimpl
from tercet.plugin_manager import PluginRegistries, collect, collect_pairs, create_plugin_manager


class InlinePolicyPlugin:
    @hookimpl
    def register_scheduling_policies(self, register):
        register("shortest-first", lambda config: "policy object")


class RoutePlugin:
    @hookimpl
    def register_http_routes(self, register):
        register("/hello", "endpoint", ["GET"])


def test_builtins_arrive_through_entry_points():
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    assert "msgpack" in registries.serializers.names() and "pickle" in registries.serializers.names()
    assert registries.transports.names() == ["ipc", "tcp"]
    assert "fcfs" in registries.scheduling_policies.names()
    assert "incremental" in registries.detokenizers.names()
    assert "torch_native" in registries.attention_backends.names()
    assert "tercet.tokenized_generate_req" in registries.message_types.names()
    assert registries.serializers.entries["msgpack"].plugin_name == "msgpack_serializer"


def test_inline_plugin_is_registered_and_attributed():
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[InlinePolicyPlugin()])
    registry = collect(plugin_manager, "register_scheduling_policies")
    assert registry.names() == ["shortest-first"]
    assert registry.get("shortest-first")(None) == "policy object"
    assert registry.entries["shortest-first"].plugin_name == plugin_manager.get_name(plugin_manager.get_plugins().pop())


def test_unknown_name_lists_the_available_ones():
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[InlinePolicyPlugin()])
    with pytest.raises(ConfigError, match="unknown scheduling policy 'fcfs'; available: shortest-first"):
        collect(plugin_manager, "register_scheduling_policies").get("fcfs")


def test_the_same_name_twice_is_an_error():
    plugin_manager = create_plugin_manager(load_entry_points=False)
    plugin_manager.register(InlinePolicyPlugin(), name="first")
    plugin_manager.register(InlinePolicyPlugin(), name="second")
    with pytest.raises(ConfigError, match="registered twice"):
        collect(plugin_manager, "register_scheduling_policies")


def test_unnamed_registrations_are_collected_as_tuples():
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[RoutePlugin()])
    assert collect_pairs(plugin_manager, "register_http_routes") == [("/hello", "endpoint", ["GET"])]


def test_every_hookspec_is_documented():
    from tercet import hookspecs

    plugin_manager = create_plugin_manager(load_entry_points=False)
    for name in dir(plugin_manager.hook):
        if not name.startswith("_"):
            assert getattr(hookspecs, name).__doc__, name
