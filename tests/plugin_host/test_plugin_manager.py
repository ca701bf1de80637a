"""Plugin discovery and registries, with a fresh plugin manager and inline plugins."""

import pytest

from tercet.errors import ConfigError
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.manager import PluginRegistries, collect, collect_pairs, create_plugin_manager


class InlinePolicyPlugin:
    @hookimpl
    def register_scheduling_policies(self, register):
        register("shortest-first", lambda config: "policy object")


class HandlerPlugin:
    @hookimpl
    def register_message_handlers(self, component, register):
        register(int, f"{component} handler")


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
    plugin_manager = create_plugin_manager(load_entry_points=False, extra_plugins=[HandlerPlugin()])
    assert collect_pairs(plugin_manager, "register_message_handlers", component="scheduler") == [
        (int, "scheduler handler")]


def test_every_hookspec_is_documented():
    from tercet.plugin_host import hookspecs

    plugin_manager = create_plugin_manager(load_entry_points=False)
    for name in dir(plugin_manager.hook):
        if not name.startswith("_"):
            assert getattr(hookspecs, name).__doc__, name


class MisspelledHookPlugin:
    @hookimpl
    def register_scheduling_policy(self, register):  # no such hook: the plural is
        register("never", object)


class WrapperPlugin:
    @hookimpl(wrapper=True)
    def register_scheduling_policies(self, register):
        return (yield)


class WrongArgumentsPlugin:
    @hookimpl
    def register_detokenizers(self, register, tokenizer):
        pass


@pytest.mark.parametrize("plugin, expected", [
    (MisspelledHookPlugin(), r"unknown hook 'register_scheduling_policy'.*the hooks are: .*register_scheduling_policies"),
    (WrapperPlugin(), "register_scheduling_policies cannot be a wrapper"),
    (WrongArgumentsPlugin(), "tokenizer"),
])
def test_loading_is_loud(plugin, expected):
    with pytest.raises(ConfigError, match=expected) as raised:
        create_plugin_manager(load_entry_points=False, extra_plugins=[plugin])
    assert "plugin " in str(raised.value)


def install_fake_distribution(folder, monkeypatch, name: str, source: str) -> None:
    """A module and its .dist-info with a ``tercet`` entry point, as pip would leave them."""
    (folder / f"{name}.py").write_text(source)
    dist_info = folder / f"{name}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[tercet]\n{name} = {name}\n")
    monkeypatch.syspath_prepend(str(folder))


BROKEN_PLUGIN = "raise ImportError('this plugin needs a library that is not installed')\n"


def test_a_plugin_that_cannot_be_imported_is_named(tmp_path, monkeypatch):
    install_fake_distribution(tmp_path, monkeypatch, "tercet_broken", BROKEN_PLUGIN)
    with pytest.raises(ConfigError, match=r"plugin 'tercet_broken' \(tercet_broken\) cannot be imported: ImportError"):
        create_plugin_manager()


def test_a_disabled_plugin_is_never_imported_and_is_listed_as_disabled(tmp_path, monkeypatch, capsys):
    from tercet.cli import main

    install_fake_distribution(tmp_path, monkeypatch, "tercet_broken", BROKEN_PLUGIN)
    plugin_manager = create_plugin_manager(disabled=["tercet_broken", "lof_policy"])
    registries = PluginRegistries.from_plugin_manager(plugin_manager)
    assert "lof" not in registries.scheduling_policies.names() and "fcfs" in registries.scheduling_policies.names()

    assert main(["plugins"]) == 1
    assert "plugin 'tercet_broken' (tercet_broken) cannot be imported" in capsys.readouterr().err
    monkeypatch.setenv("TERCET_PLUGINS_DISABLE", "tercet_broken")
    assert main(["plugins"]) == 0
    assert "tercet_broken  (tercet_broken 0.1; module tercet_broken)\n  disabled (plugins.disable): not loaded" in (
        capsys.readouterr().out
    )


def test_disabling_a_plugin_that_is_not_installed_is_an_error():
    with pytest.raises(ConfigError, match="plugins.disable names 'no_such_plugin'.*installed plugins: .*fcfs_policy"):
        create_plugin_manager(disabled=["no_such_plugin"])


def test_every_component_kind_has_a_documented_hook_a_registry_and_a_config_key():
    from tercet.config import TercetConfig
    from tercet.plugin_host import hookspecs
    from tercet.plugin_host.kinds import COMPONENT_KINDS

    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    config = TercetConfig()
    for kind in COMPONENT_KINDS:
        assert getattr(hookspecs, kind.hook).__doc__ == kind.doc
        assert getattr(registries, kind.registry).kind == kind.kind
        if kind.config_key is not None:
            section, key = kind.config_key
            # The default names a built-in implementation, or one of the kind's own choices.
            default = getattr(getattr(config, section), key)
            assert default in getattr(registries, kind.registry).names() or default in kind.extra_choices


class DeclaringPlugin:
    def __init__(self, versions):
        self.TERCET_API_VERSIONS = versions

    @hookimpl
    def register_transports(self, register):
        register("declared", object)


def test_a_plugin_declaring_the_running_api_version_loads():
    from tercet.plugin_api import API_VERSION

    major = int(API_VERSION.split(".")[0])
    create_plugin_manager(load_entry_points=False, extra_plugins=[DeclaringPlugin(f">={major}.0,<{major + 1}")])


@pytest.mark.parametrize("versions, expected", [
    (">=99", r"supports tercet plugin API >=99, but this tercet's is \d+\.\d+"),
    ("<0.1", r"supports tercet plugin API <0.1"),
    ("one point oh", "TERCET_API_VERSIONS must be a version specifier"),
])
def test_a_plugin_made_for_another_api_version_is_refused_naming_both(versions, expected):
    with pytest.raises(ConfigError, match=expected):
        create_plugin_manager(load_entry_points=False, extra_plugins=[DeclaringPlugin(versions)])


def test_the_public_api_lists_what_it_exports():
    import tercet.plugin_api as plugin_api

    assert sorted(plugin_api.__all__) == plugin_api.__all__
    for name in plugin_api.__all__:
        assert hasattr(plugin_api, name), name


def test_a_kinds_own_choices_name_no_registration_and_are_listed_when_a_name_is_unknown():
    from tercet.config import TercetConfig

    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    assert registries.chosen("linear_methods", TercetConfig()) is None  # "auto"
    with pytest.raises(ConfigError, match=r"unknown linear method 'q3' \(model.quantization\); available: auto, none, dense"):
        registries.chosen("linear_methods", TercetConfig().replace("model", quantization="q3"))


def test_a_shadowed_copy_of_a_distribution_adds_no_plugins(tmp_path, monkeypatch):
    """Two copies of one distribution on sys.path (a venv's over a system-wide one): only the
    copy that import would use counts, so the other's plugins are not even imported."""
    from tercet.testing import write_plugin_folder

    used = write_plugin_folder(tmp_path / "used", {"shadow_demo_used": "json"}, distribution="tercet-shadow-demo")
    shadowed = write_plugin_folder(tmp_path / "shadowed", {"shadow_demo_stale": "no_such_module_anywhere"},
                                   distribution="tercet-shadow-demo")
    monkeypatch.syspath_prepend(str(shadowed))
    monkeypatch.syspath_prepend(str(used))
    names = [name for name, _ in create_plugin_manager().list_name_plugin()]
    assert "shadow_demo_used" in names
    assert "shadow_demo_stale" not in names
