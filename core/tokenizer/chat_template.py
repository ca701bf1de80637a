"""Rendering a conversation with the model's chat template: Jinja2, sandboxed.

Chat templates come with the model, so they are untrusted code: they run in
Jinja's immutable sandbox, which refuses attribute tricks and any change to
the values passed in. The environment is the one templates are written for
(Hugging Face's): ``trim_blocks`` and ``lstrip_blocks``, ``break`` and
``continue``, ``raise_exception(message)``, ``strftime_now(format)``, a
``tojson`` that leaves non-ASCII text and HTML characters alone, and the
``{% generation %}`` blocks that training templates use to mark the
assistant's text (rendered as they are: serving has no use for the mark).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The template a model with several names for templates uses by default, and
# the one for requests that offer tools.
DEFAULT_TEMPLATE_NAME = "default"
TOOL_USE_TEMPLATE_NAME = "tool_use"


class ChatTemplateError(ValueError):
    """No template to use, or the one named does not exist."""


def choose_chat_template(templates: str | dict[str, str] | None, chosen: str | None = None,
                         tools: list | None = None) -> str:
    """The template source to render: ``chosen`` (a name, or a template itself), else the model's default."""
    if isinstance(templates, dict):
        if chosen is not None:
            return templates.get(chosen, chosen)
        if tools is not None and TOOL_USE_TEMPLATE_NAME in templates:
            return templates[TOOL_USE_TEMPLATE_NAME]
        if DEFAULT_TEMPLATE_NAME in templates:
            return templates[DEFAULT_TEMPLATE_NAME]
        raise ChatTemplateError(
            f"the model has several chat templates ({', '.join(sorted(templates))}) and none is the default"
        )
    if chosen is not None:
        return chosen
    if templates is None:
        raise ChatTemplateError("the model has no chat template")
    return templates


def render_chat(
    template: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = False,
    tools: list[dict] | None = None,
    documents: list[dict] | None = None,
    variables: dict | None = None,
) -> str:
    """The conversation as text. ``variables`` (the special tokens, say) are visible to the template."""
    _check_conversation(messages, tools)
    # Keys set to None (OpenAI's content=None, tool_calls=None) are left out:
    # templates test whether a key is there, and would otherwise print "None".
    messages = [{key: value for key, value in message.items() if value is not None} for message in messages]
    return compiled_chat_template(template).render(
        **(variables or {}),
        messages=messages,
        tools=tools,
        documents=documents,
        add_generation_prompt=add_generation_prompt,
    )


def _check_conversation(messages: list[dict], tools: list[dict] | None) -> None:
    if not messages:
        raise ValueError("cannot apply the chat template to an empty conversation")
    for message in messages:
        if not isinstance(message, dict):
            raise TypeError(f"chat messages must be dicts, got {message!r}")
    if tools is not None and not all(isinstance(tool, dict) for tool in tools):
        raise TypeError("tools must be JSON schemas (dicts)")


@functools.lru_cache(maxsize=8)
def template_renders_tools(template: str) -> bool:
    """Whether the template reads the ``tools`` variable, so can offer tools to the model itself."""
    try:
        return "tools" in meta.find_undeclared_variables(_environment().parse(template))
    except jinja2.TemplateError:
        return False  # rendering it reports the error


@functools.lru_cache(maxsize=8)
def compiled_chat_template(template: str) -> jinja2.Template:
    """The template compiled once: a served model renders the same one for every request."""
    return _environment().from_string(template)


@functools.lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlocks, loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML, which would change the prompt.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _GenerationBlocks(Extension):
    """``{% generation %}...{% endgeneration %}``: the body, unchanged."""

    tags = frozenset({"generation"})

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()
