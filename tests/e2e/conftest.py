from pathlib import Path

import pytest
from network_namespaces import NetworkNamespaces, can_create_namespaces

E2E_DIR = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """Mark every test in this folder ``e2e``: each starts a server, and ``-m "not e2e"``
    (the fast lane) must leave them all out, including those in a file added later.
    The hook sees the whole session's items, so it picks this folder's own."""
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


# The servers come from tercet.testing's fixtures; these are the names tercet's tests use.
@pytest.fixture(scope="module")
def start_server(tercet_start_server):
    """Start a real server; the servers a test module starts are stopped when the module ends.
    Kept to the session's end, they piled up: 36 idle servers, two thirds of the machine's memory,
    by the end of the end-to-end tests. The shared tiny server (tiny_server) is the session's."""
    started = []

    def start(*args, **kwargs):
        server = tercet_start_server(*args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_server(tercet_tiny_server):
    return tercet_tiny_server


@pytest.fixture(scope="module")
def namespaces():
    """Two network namespaces standing in for two hosts (tests/e2e/two_nodes.py), for one test module."""
    if not can_create_namespaces():
        pytest.fail("CI runs as root with iproute2, so the namespaces must be creatable here")
    with NetworkNamespaces("nodes") as created:
        yield created
