"""ProcessContext: the one place a process finds the component its config chooses, and that component's plugin."""

from tercet.config import TercetConfig
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugin_host.manager import create_plugin_manager
from tercet.processes.context import ProcessContext


class InlinePolicyPlugin:
    @hookimpl
    def register_scheduling_policies(self, register):
        register("shortest-first", lambda config: "policy object")


def test_the_chosen_component_comes_with_the_plugin_that_registered_it():
    plugin = InlinePolicyPlugin()
    plugin_manager = create_plugin_manager(extra_plugins=[plugin])
    context = ProcessContext.create(TercetConfig().replace("scheduler", policy="shortest-first"), plugin_manager)
    assert context.chosen("scheduling_policies")(None) == "policy object"
    assert context.chosen_plugin_name("scheduling_policies") == plugin_manager.get_name(plugin)
    assert context.chosen_plugin_name("detokenizers") == "incremental_detokenizer"


def test_a_choice_that_names_no_registration_has_no_plugin():
    context = ProcessContext.create(TercetConfig())
    assert context.chosen("linear_methods") is None and context.chosen_plugin_name("linear_methods") is None


def test_the_serializer_keeps_the_configured_message_size():
    import pytest

    from tercet.errors import ConfigError

    context = ProcessContext.create(TercetConfig().replace("ipc", max_message_bytes="1MiB"))
    assert context.create_serializer().limits.max_bytes == 2**20
    assert ProcessContext.create(TercetConfig()).message_registry.limits.max_bytes == 256 * 2**20
    with pytest.raises(ConfigError, match="ipc.max_message_bytes must be at least 64KiB, got '1000'"):
        ProcessContext.create(TercetConfig().replace("ipc", max_message_bytes="1000"))
