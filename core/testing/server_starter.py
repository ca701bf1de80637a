"""Starting real servers for a test session, each with its own config and plugins."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

from tercet.testing.plugin_folder import import_root, write_plugin_folder
from tercet.testing.running_server import RunningServer


class ServerStarter:
    """Call it to start a server and wait until it is healthy; ``stop_all`` stops every one started."""

    def __init__(self, make_work_dir: Callable[[], Path]):
        self.make_work_dir = make_work_dir
        self.started: list[RunningServer] = []

    def __call__(
        self,
        model_path: Path | None,
        settings: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        config: str | None = None,
        plugins: Mapping[str, str] | None = None,
        timeout: float = 300,
    ) -> RunningServer:
        """``config``: the text of a tercet.toml, passed with ``--config``. ``plugins``: plugin
        name -> module for plugins that are importable here but not installed; the server's
        processes find them through entry points, as they would once installed."""
        work_dir = self.make_work_dir()
        extra_args = list(extra_args)
        env = dict(env or {})
        if config is not None:
            config_file = work_dir / "tercet.toml"
            config_file.write_text(config)
            extra_args += ["--config", str(config_file)]
        if plugins:
            env["PYTHONPATH"] = plugin_pythonpath(work_dir / "plugins", plugins, env.get("PYTHONPATH"))
        server = RunningServer(model_path, work_dir / "server.log", settings, extra_args, env)
        self.started.append(server)
        return server.wait_until_healthy(timeout)

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()


def plugin_pythonpath(folder: Path, plugins: Mapping[str, str], pythonpath: str | None) -> str:
    """A PYTHONPATH on which a child process finds ``plugins`` by entry point and imports their modules."""
    write_plugin_folder(folder, plugins)
    roots = dict.fromkeys(str(import_root(module)) for module in plugins.values())
    pythonpath = pythonpath if pythonpath is not None else os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(folder), *roots, *([pythonpath] if pythonpath else [])])
