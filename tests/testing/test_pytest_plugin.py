"""tercet.testing arrives as a pytest plugin wherever tercet is installed, and costs little to load."""

import subprocess
import sys
from importlib import metadata

import pytest

FIXTURES = ["tercet_default_model_dir", "tercet_tiny_llama_dir", "tercet_scheduler", "tercet_start_server",
            "tercet_tiny_server"]


def test_it_is_a_pytest11_entry_point():
    (entry_point,) = [entry_point for entry_point in metadata.entry_points(group="pytest11") if entry_point.name == "tercet"]
    assert entry_point.value == "tercet.testing.pytest_plugin"
    assert entry_point.dist.metadata["name"] == "tercet"


def test_a_project_outside_tercet_sees_the_fixtures(tmp_path):
    """A plain test folder (no conftest, no import of tercet) can ask for every fixture."""
    (tmp_path / "test_uses_kit.py").write_text("def test_uses(request):\n    pass\n")
    listing = subprocess.run([sys.executable, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider", str(tmp_path)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    for name in FIXTURES:
        assert name in listing.stdout


def test_loading_it_imports_nothing_heavy():
    # pytest imports it in every run of every project where tercet is installed.
    probe = ("import sys, tercet.testing.pytest_plugin, tercet.testing; "
             "print(sorted(name for name in ('torch', 'transformers', 'zmq', 'httpx') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_helpers_load_on_first_use():
    import tercet.testing

    assert tercet.testing.TINY_SETTINGS[0].startswith("cache.")
    assert set(tercet.testing.__all__) <= set(dir(tercet.testing))
    with pytest.raises(AttributeError, match="no attribute 'no_such_helper'"):
        tercet.testing.no_such_helper
