"""A real tiny server for the serving benchmark's end-to-end tests (tercet.testing's starter)."""

import pytest


@pytest.fixture(scope="session")
def bench_tiny_server(tercet_start_server, tiny_llama_dir):
    from tercet.testing import TINY_SETTINGS

    # Its own server, not the shared tercet_tiny_server: the benchmark's figures are its alone.
    return tercet_start_server(tiny_llama_dir, TINY_SETTINGS)
