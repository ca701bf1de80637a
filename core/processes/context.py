"""What every tercet process builds first: plugins, registries and the serializer.

Children are spawned, not forked, so each one calls :meth:`ProcessContext.create`
with the resolved config and gets the same plugins from the entry points.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import sys
from dataclasses import dataclass

import pluggy

from tercet.byte_size import parse_byte_size
from tercet.config import TercetConfig, check_plugin_choices
from tercet.errors import ConfigError
from tercet.ipc.channels import encrypt_tcp_endpoints
from tercet.ipc.decode_limits import DecodeLimits
from tercet.ipc.messages import MessageRegistry
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager


@dataclass(frozen=True)
class ProcessContext:
    config: TercetConfig
    plugin_manager: pluggy.PluginManager
    registries: PluginRegistries
    message_registry: MessageRegistry

    @classmethod
    def create(cls, config: TercetConfig, plugin_manager: pluggy.PluginManager | None = None) -> "ProcessContext":
        # Across nodes (where the secret is required) every tcp endpoint is encrypted, in every process.
        encrypt_tcp_endpoints(config.parallel.node_secret if config.parallel.nnodes > 1 else None)
        plugin_manager = plugin_manager or create_plugin_manager(disabled=config.disabled_plugins)
        registries = PluginRegistries.from_plugin_manager(plugin_manager)
        check_plugin_choices(config, registries)
        limits = decode_limits(config)
        return cls(config, plugin_manager, registries, MessageRegistry.from_plugin_registries(registries, limits))

    def chosen(self, registry: str):
        """The factory the config chooses for a component kind (``"scheduling_policies"``, say):
        every part of tercet finds its chosen component here, and only here."""
        return self.registries.chosen(registry, self.config)

    def chosen_plugin_name(self, registry: str) -> str | None:
        """The plugin that registered :meth:`chosen`'s factory (failures are counted against it);
        None where the config names none of the kind's registrations (``"auto"``)."""
        registration = self.registries.chosen_registration(registry, self.config)
        return None if registration is None else registration.plugin_name

    def create_serializer(self):
        return self.chosen("serializers")(self.message_registry)

    def create_transport(self):
        return self.chosen("transports")(self.config.ipc)


# Below this even an ordinary step's output may not fit.
MIN_MESSAGE_BYTES = 64 * 1024


def decode_limits(config: TercetConfig) -> DecodeLimits:
    max_bytes = parse_byte_size(config.ipc.max_message_bytes, "ipc.max_message_bytes")
    if max_bytes < MIN_MESSAGE_BYTES:
        raise ConfigError(f"ipc.max_message_bytes must be at least 64KiB, got {config.ipc.max_message_bytes!r}")
    return DecodeLimits(max_bytes=max_bytes)


def configure_logging(component: str, level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format=f"%(asctime)s [tercet {component}] %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when its parent dies, so no child is ever orphaned."""
    if not sys.platform.startswith("linux"):
        return
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
