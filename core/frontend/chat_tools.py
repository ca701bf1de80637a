"""The API server's tool-call parser, and the two places a chat request uses it:
the conversation given to the chat template, and the reader of the answer."""

from __future__ import annotations

from tercet.containment import ContainedFailures
from tercet.tokenizer.chat_template import ChatTemplateError, choose_chat_template, template_renders_tools
from tercet.tools.prompt import prepare_conversation
from tercet.tools.reader import ToolCallReader
from tercet.tools.request import ToolRequest
from tercet.tools.tool_calls import ToolCallParser


class ChatTools:
    def __init__(self, parser: ToolCallParser, plugin_name: str | None, failures: ContainedFailures, chat_template):
        self.parser = parser
        self.plugin_name = plugin_name
        self.failures = failures
        self.chat_template = chat_template  # the tokenizer's: a source, a dict of named sources, or None

    @classmethod
    def create(cls, context, tokenizer, failures: ContainedFailures) -> "ChatTools":
        """The parser ``[tools] parser`` names."""
        return cls(context.chosen("tool_call_parsers")(), context.chosen_plugin_name("tool_call_parsers"), failures,
                   getattr(tokenizer, "chat_template", None))

    def conversation(self, messages: list[dict], tool_request: ToolRequest | None) -> tuple[list[dict], list | None]:
        """``(messages, tools)`` for the template (see :mod:`tercet.tools.prompt`)."""
        tools = list(tool_request.tools) if tool_request else None
        try:
            template = choose_chat_template(self.chat_template, None, tools)
        except ChatTemplateError:
            return messages, tools  # rendering reports the missing template, as for any chat
        return prepare_conversation(messages, tools, template_renders_tools(template), self.parser)

    def generation_prefix(self, tool_request: ToolRequest | None) -> str:
        """Text after the generation prompt: a forced call starts in the parser's format."""
        return self.parser.call_prefix if tool_request is not None and tool_request.is_forced else ""

    def reader(self, tool_request: ToolRequest | None) -> ToolCallReader | None:
        """How the answer is searched for calls; None when it is not."""
        if tool_request is None or not tool_request.parses_calls:
            return None
        if tool_request.is_forced:
            return ToolCallReader(None, 1)
        return ToolCallReader(self.parser, tool_request.max_calls, self.failures, self.plugin_name)
