"""An empty or placeholder API key stops ``tercet serve`` before anything starts (issue 12, item 5).

With ``--api-key "$KEY"`` and KEY unset, the server used to serve everyone.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def serve(args: list[str], environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # The timeout only stops a server that started anyway; the refusal comes long before it.
    return subprocess.run(
        [sys.executable, "-m", "tercet", "serve", "--port", "0", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(environ or {})},
    )


@pytest.mark.parametrize("placeholder", ["", "none", "Null", " "])
def test_serve_with_an_empty_or_placeholder_api_key_flag_fails_at_once(placeholder):
    completed = serve(["--api-key", placeholder])
    assert completed.returncode != 0
    assert "--api-key is" in completed.stderr and "would turn authentication off" in completed.stderr
    # It failed while reading its configuration: no child was started, no model loaded.
    assert "is ready" not in completed.stderr and "IPC endpoints" not in completed.stderr


def test_serve_with_an_empty_api_key_variable_fails_naming_it():
    completed = serve([], {"TERCET_SERVER_API_KEY": ""})
    assert completed.returncode != 0
    assert "TERCET_SERVER_API_KEY is ''" in completed.stderr


@pytest.mark.parametrize("where", ["--api-key", "config file"])
def test_serve_with_spaces_around_the_api_key_fails_at_once(where, tmp_path):
    """Issue 25: such a server started, then answered every request with a 401 (HTTP drops
    the spaces around a header's value, so no client can send them)."""
    toml = tmp_path / "tercet.toml"
    toml.write_text('[server]\napi_key = " secret "\n')
    completed = serve(["--api-key", " secret "] if where == "--api-key" else ["--config", str(toml)])
    assert completed.returncode != 0
    assert "api_key has whitespace around it (1 leading, 1 trailing)" in completed.stderr.replace("--api-key", "api_key")
    assert "is ready" not in completed.stderr and "IPC endpoints" not in completed.stderr
