"""The built-in reasoning parser ``think``: registered like any plugin, chosen by [reasoning] parser."""

import pytest

from tercet.config import TercetConfig, load_config
from tercet.errors import ConfigError
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.reasoning.parser import ReasoningPiece, split_reasoning


@pytest.fixture(scope="module")
def registries():
    return PluginRegistries.from_plugin_manager(create_plugin_manager())


def parser_for(registries, **reasoning):
    config = load_config(environ={}, overrides={"reasoning": reasoning})
    return registries.chosen("reasoning_parsers", config)(config.reasoning)


def test_none_is_the_default_and_separates_nothing(registries):
    assert TercetConfig().reasoning.parser == "none"
    assert registries.chosen("reasoning_parsers", TercetConfig()) is None


def test_think_reads_deepseek_and_qwen_style_reasoning(registries):
    assert registries.reasoning_parsers.entries["think"].plugin_name == "think_reasoning_parser"
    parser = parser_for(registries, parser="think")
    assert split_reasoning(parser, "<think>hm</think>\n\nYes.") == ReasoningPiece("hm", "Yes.")


def test_a_template_that_opens_the_reasoning(registries):
    parser = parser_for(registries, parser="think", starts_in_reasoning=True)
    assert split_reasoning(parser, "hm</think>Yes.") == ReasoningPiece("hm", "Yes.")
    assert parser.frame.start == ""


def test_an_unknown_parser_lists_the_choices(registries):
    with pytest.raises(ConfigError, match=r"unknown reasoning parser 'qwen9' \(reasoning.parser\); available: none, think"):
        registries.chosen("reasoning_parsers", load_config(environ={}, overrides={"reasoning": {"parser": "qwen9"}}))
