"""HTTP routes as a kind: what register() takes, one path per plugin, references resolved late."""

import pytest

from tercet.errors import ConfigError
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.http_route import HttpRoute, http_route_registration, resolve_reference
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager


class HelloRoutes:
    @hookimpl
    def register_http_routes(self, register):
        register("/hello", "json:dumps", ["get"], openapi={"get": {"summary": "hi"}}, needs_children=False)


def registries_of(*plugins_by_name) -> PluginRegistries:
    plugin_manager = create_plugin_manager(load_entry_points=False)
    for name, plugin in plugins_by_name:
        plugin_manager.register(plugin, name=name)
    return PluginRegistries.from_plugin_manager(plugin_manager)


def test_a_route_is_registered_under_its_path_with_its_plugin():
    registration = registries_of(("acme", HelloRoutes())).http_routes.entries["/hello"]
    assert registration.plugin_name == "acme"
    assert registration.obj == HttpRoute("/hello", "json:dumps", ("GET",), {"get": {"summary": "hi"}},
                                         needs_children=False)


def test_two_plugins_claiming_one_path_is_an_error_naming_both():
    with pytest.raises(ConfigError, match="HTTP route '/hello' is registered twice: by '(acme|other)' and by '(acme|other)'"):
        registries_of(("acme", HelloRoutes()), ("other", HelloRoutes()))


def test_the_builtin_apis_are_route_plugins():
    routes = PluginRegistries.from_plugin_manager(create_plugin_manager()).http_routes
    assert routes.entries["/v1/chat/completions"].plugin_name == "openai_routes"
    assert routes.entries["/generate"].plugin_name == "native_routes"
    assert routes.entries["/flush_cache"].plugin_name == "control_routes"
    disabled = PluginRegistries.from_plugin_manager(create_plugin_manager(disabled=["native_routes"])).http_routes
    assert "/generate" not in disabled.names() and "/v1/completions" in disabled.names()


@pytest.mark.parametrize("arguments, problem", [
    (("hello", "json:dumps"), "must be a string starting with '/'"),
    (("/hello", "json:dumps", ["FETCH"]), "unknown methods \\['FETCH'\\]"),
    (("/hello",), "missing 1 required positional argument"),
])
def test_a_malformed_registration_is_an_error_naming_its_plugin(arguments, problem):
    class Malformed:
        @hookimpl
        def register_http_routes(self, register):
            register(*arguments)

    with pytest.raises(ConfigError, match=f"plugin 'acme', register_http_routes: .*{problem}"):
        registries_of(("acme", Malformed()))


def test_references_are_imported_only_when_resolved():
    _, route = http_route_registration("/x", "json:dumps", openapi="json:__name__")
    assert route.endpoint == "json:dumps"
    import json

    assert route.resolved().endpoint is json.dumps and route.resolved().openapi == "json"
    with pytest.raises(ConfigError, match="'no_such_module_here:f' names nothing importable"):
        resolve_reference("no_such_module_here:f")


CLAIMS_V1_MESSAGES = '''
from tercet.plugin_api import hookimpl


@hookimpl
def register_http_routes(register):
    register("/v1/messages", "json:dumps", ["POST"])
'''


def test_an_installed_plugin_claiming_a_builtin_path_stops_start_up_naming_both(tmp_path):
    import os
    import subprocess
    import sys

    from tercet.testing import write_plugin_folder

    folder = write_plugin_folder(tmp_path, {"acme_messages": "acme_messages"}, {"acme_messages": CLAIMS_V1_MESSAGES})
    env = {**os.environ, "PYTHONPATH": str(folder)}
    # `tercet config show` builds every registry, as a starting server's processes do, and stops where they would.
    shown = subprocess.run([sys.executable, "-m", "tercet", "config", "show"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode != 0
    assert "HTTP route '/v1/messages' is registered twice: by " in shown.stderr
    assert "'anthropic_routes'" in shown.stderr and "'acme_messages'" in shown.stderr
    disabled = subprocess.run([sys.executable, "-m", "tercet", "config", "show", "--set",
                               "plugins.disable=anthropic_routes"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    assert disabled.returncode == 0, disabled.stderr
