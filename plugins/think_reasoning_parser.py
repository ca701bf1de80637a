"""The built-in reasoning parser ``think``, registered as any third party would.

The format of DeepSeek-R1, Qwen3 and the many models distilled from them: the
reasoning comes first, between ``<think>`` and ``</think>``, then the answer.
Some chat templates write ``<think>`` into the prompt themselves, so the model
starts inside its reasoning and only ever writes the closing tag: for those,
set ``[reasoning] starts_in_reasoning = true``.
"""

from __future__ import annotations

from tercet.plugin_api import TaggedReasoningParser, hookimpl

START_TAG, END_TAG = "<think>", "</think>"


def create_think_parser(reasoning_config) -> TaggedReasoningParser:
    return TaggedReasoningParser(START_TAG, END_TAG, starts_inside=reasoning_config.starts_in_reasoning)


@hookimpl
def register_reasoning_parsers(register):
    register("think", create_think_parser)
