"""A folder on sys.path with a dist-info is a distribution: its plugins load by entry point."""

from importlib import metadata

import pytest

from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.testing import write_plugin_folder
from tercet.testing.plugin_folder import import_root

SOURCE = '''
from tercet.plugin_api import SchedulingPolicy, hookimpl


class Reversed(SchedulingPolicy):
    def order(self, waiting, view):
        return list(reversed(waiting))


@hookimpl
def register_scheduling_policies(register):
    register("kit-folder-reversed", Reversed)
'''


def test_its_plugins_load_through_their_entry_points(tmp_path, monkeypatch):
    folder = write_plugin_folder(tmp_path, {"kit_folder_demo": "kit_folder_demo_module"},
                                 modules={"kit_folder_demo_module": SOURCE}, distribution="kit-folder-demo")
    monkeypatch.syspath_prepend(str(folder))
    assert metadata.distribution("kit-folder-demo").version == "0.0"
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).scheduling_policies
    assert registry.entries["kit-folder-reversed"].plugin_name == "kit_folder_demo"
    assert import_root("kit_folder_demo_module") == folder


def test_import_root_of_a_package_is_the_folder_above_it(tmp_path, monkeypatch):
    package = tmp_path / "src" / "kit_folder_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    assert import_root("kit_folder_package.plugin") == tmp_path / "src"


def test_a_module_that_cannot_be_imported_is_named():
    with pytest.raises(ModuleNotFoundError, match="no_such_kit_module"):
        import_root("no_such_kit_module.plugin")
