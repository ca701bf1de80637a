from pathlib import Path

import pytest
from running_server import TINY_SETTINGS, RunningServer

E2E_DIR = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """Mark every test in this folder ``e2e``: each starts a server, and ``-m "not e2e"``
    (the fast lane) must leave them all out, including those in a file added later.
    The hook sees the whole session's items, so it picks this folder's own."""
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Start a real server; every server started is stopped at the end of the session."""
    started: list[RunningServer] = []

    def start(model_path, settings=(), extra_args=(), env=None):
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        server = RunningServer(model_path, log_path, list(settings), list(extra_args), env)
        started.append(server)
        return server.wait_until_healthy()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS)
