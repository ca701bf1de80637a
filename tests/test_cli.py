import json
import os
import subprocess
import sys

import pytest
import torch

from tercet.cli import main


def test_config_show_prints_resolved_values(capsys):
    assert main(["config", "show", "--port", "8123", "--set", "scheduler.max_running_requests=7"]) == 0
    shown = capsys.readouterr().out
    assert "port = 8123" in shown
    assert "max_running_requests = 7" in shown


def test_config_show_rejects_unknown_key(capsys):
    assert main(["config", "show", "--set", "server.colour=blue"]) != 0
    assert "server.colour" in capsys.readouterr().err


def test_config_show_rejects_unknown_plugin_name(capsys):
    assert main(["config", "show", "--set", "ipc.transport=carrier-pigeon"]) != 0
    assert "available: ipc, tcp" in capsys.readouterr().err


def test_plugins_json_lists_builtins_with_distribution():
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    plugins = {plugin["name"]: plugin for plugin in json.loads(completed.stdout)}
    serializer = plugins["msgpack_serializer"]
    assert serializer["distribution"] == "tercet"
    assert serializer["hooks"] == ["register_serializers"]
    assert serializer["registers"] == [{"kind": "serializer", "name": "msgpack"}]
    assert plugins["torch_native_attention"]["registers"] == [
        {"kind": "attention backend", "name": "torch_native", "unavailable_reason": None}
    ]
    backends = [item["name"] for plugin in plugins.values() for item in plugin["registers"]
                if item["kind"] == "attention backend"]
    assert {"torch_native", "paged_cpu", "triton", "flashinfer"} <= set(backends)


def test_plugins_listing_says_why_a_backend_is_unavailable():
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "plugins"], capture_output=True, text=True, check=True,
        env={**os.environ, "TRITON_INTERPRET": "0"},
    )
    assert "registers attention backend: torch_native (available)" in completed.stdout
    if not torch.cuda.is_available():  # flashinfer wants CUDA, triton a GPU or its interpreter
        assert "registers attention backend: flashinfer (unavailable: " in completed.stdout
        assert "registers attention backend: triton (unavailable: " in completed.stdout


def test_plugins_text_listing(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "registers transport: tcp" in out


@pytest.mark.parametrize("placeholder", ["", "none", "NULL", "  "])
def test_an_empty_or_placeholder_api_key_flag_is_an_error_naming_the_flag(capsys, placeholder):
    assert main(["config", "show", "--api-key", placeholder]) != 0
    assert "--api-key is" in capsys.readouterr().err


def test_an_api_key_flag_with_spaces_around_it_is_an_error_naming_the_flag(capsys):
    assert main(["config", "show", "--api-key", " secret "]) != 0
    assert "--api-key has whitespace around it (1 leading, 1 trailing)" in capsys.readouterr().err


def test_the_dtype_flag_offers_exactly_the_dtypes_the_config_accepts():
    import argparse
    from dataclasses import fields

    from tercet.cli import add_config_arguments
    from tercet.config import ModelConfig

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    (flag,) = [action for action in parser._actions if action.dest == "dtype"]
    (dtype_field,) = [field for field in fields(ModelConfig) if field.name == "dtype"]
    assert tuple(flag.choices) == dtype_field.metadata["choices"]


def test_the_lora_flag_serves_an_adapter_under_its_name(capsys):
    assert main(["config", "show", "--lora", "sql=/adapters/sql", "--lora", "chat=/adapters/chat"]) == 0
    assert 'adapters = ["sql=/adapters/sql", "chat=/adapters/chat"]' in capsys.readouterr().out
