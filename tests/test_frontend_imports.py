"""The API process and the detokenizer never import torch (nor transformers, which imports it).

They only tokenize and detokenize, and torch would cost them seconds to start and some 300 MB
each. The probe runs in a fresh interpreter (this one has torch already): it builds both as
``tercet serve`` does, with every installed plugin loaded, from the default model's GGUF.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from frontend_probe import mapped_heavy_modules

from tercet.formats.default_model import find_default_gguf

PROBE = Path(__file__).with_name("frontend_probe.py")


def test_the_probe_sees_torch_where_it_is_loaded():
    import torch  # noqa: F401

    assert "torch" in mapped_heavy_modules(os.getpid())


def test_the_api_process_and_the_detokenizer_do_not_import_torch(tmp_path):
    env = {**os.environ, "TERCET_CACHE_DIR": str(tmp_path / "cache")}  # a cold cache: the GGUF is converted
    completed = subprocess.run(
        [sys.executable, str(PROBE), str(find_default_gguf())], capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert loaded == {"server": [], "detokenizer": []}, completed.stderr
