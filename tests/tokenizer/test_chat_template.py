"""The chat template environment: what templates rely on, and what the sandbox refuses."""

from __future__ import annotations

from datetime import datetime

import jinja2
import pytest

from tercet.tokenizer.chat_template import ChatTemplateError, choose_chat_template, render_chat

HELLO = [{"role": "user", "content": "héllo <b>&</b>"}]


def render(template: str, messages=HELLO, **options) -> str:
    return render_chat(template, messages, **options)


def test_blocks_are_trimmed_and_stripped():
    template = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render(template) == "[héllo <b>&</b>]\n"


def test_tojson_keeps_text_as_it_is_and_takes_options():
    assert render("{{ messages | tojson }}") == '[{"role": "user", "content": "héllo <b>&</b>"}]'
    assert render("{{ {'b': 1, 'a': [1]} | tojson(indent=2, sort_keys=True) }}") == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}'
    assert render("{{ 'é' | tojson(ensure_ascii=True) }}") == '"\\u00e9"'


def test_raise_exception_raises_a_template_error():
    with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
        render("{{ raise_exception('roles must alternate') }}")


def test_loop_controls_generation_blocks_and_namespaces():
    template = (
        "{% set ns = namespace(seen=0) %}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% if m.role == 'system' %}{% continue %}{% endif %}{% set ns.seen = ns.seen + 1 %}"
        "{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}{{ ns.seen }}"
    )
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "user", "content": "x"}]
    assert render(template, messages) == "<u>1"


def test_strftime_now_and_the_arguments_a_template_sees():
    assert render("{{ strftime_now('%Y') }}") == str(datetime.now().year)
    template = "{{ add_generation_prompt }} {{ tools | length }} {{ documents }} {{ bos_token }}"
    assert render(template, add_generation_prompt=True, tools=[{"name": "f"}], variables={"bos_token": "<s>"}) == (
        "True 1 None <s>")


def test_keys_set_to_none_are_left_out_and_the_callers_messages_are_untouched():
    messages = [{"role": "assistant", "content": "hi", "tool_calls": None}]
    assert render("{{ 'tool_calls' in messages[0] }}", messages) == "False"
    assert messages[0] == {"role": "assistant", "content": "hi", "tool_calls": None}


@pytest.mark.parametrize("escape", [
    "{{ messages.__class__.__base__ }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ messages.append(1) }}",
    "{{ messages[0].update({'role': 'x'}) }}",
])
def test_the_sandbox_refuses_escapes_and_changes(escape):
    with pytest.raises(jinja2.exceptions.SecurityError):
        render(escape)


def test_inputs_that_are_not_a_conversation_are_refused():
    with pytest.raises(ValueError, match="empty conversation"):
        render("x", [])
    with pytest.raises(TypeError):
        render("x", ["not a message"])
    with pytest.raises(TypeError):
        render("x", tools=[print])


def test_choosing_among_named_templates():
    named = {"default": "D", "tool_use": "T"}
    assert choose_chat_template(named) == "D"
    assert choose_chat_template(named, tools=[]) == "T"
    assert choose_chat_template(named, "tool_use") == "T"
    assert choose_chat_template(named, "{{ 1 }}") == "{{ 1 }}"  # not a name: a template itself
    assert choose_chat_template("S") == "S" and choose_chat_template("S", "C") == "C"
    with pytest.raises(ChatTemplateError, match="none is the default"):
        choose_chat_template({"a": "A"})
    with pytest.raises(ChatTemplateError, match="no chat template"):
        choose_chat_template(None)
