from tercet.plugins.hermes_tool_parser import HermesToolCallParser
from tercet.tokenizer.chat_template import render_chat, template_renders_tools
from tercet.tools.prompt import prepare_conversation

PARSER = HermesToolCallParser()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "18 C", "tool_call_id": "call_1"},
    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
]
TEXT_ONLY = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
WITH_TOOLS = (
    "{% if tools %}TOOLS {{ tools | map(attribute='function.name') | join(',') }}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments.city }}{% endfor %}\n{% endfor %}"
)


def test_a_conversation_without_tools_is_left_alone():
    messages = [{"role": "user", "content": "hi"}]
    assert prepare_conversation(messages, None, False, PARSER) == (messages, None)


def test_a_template_that_renders_tools_gets_them_with_arguments_decoded():
    assert template_renders_tools(WITH_TOOLS) and not template_renders_tools(TEXT_ONLY)
    messages, tools = prepare_conversation(CONVERSATION, TOOLS, True, PARSER)
    assert tools == TOOLS
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    text = render_chat(WITH_TOOLS, messages, tools=tools)
    assert text.startswith("TOOLS get_weather\n") and "CALL get_weather Paris" in text


def test_other_templates_get_tools_calls_and_results_written_by_the_parser():
    messages, tools = prepare_conversation(CONVERSATION, TOOLS, False, PARSER)
    assert tools is None
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == PARSER.tools_prompt(TOOLS)
    assert PARSER.parse(messages[2]["content"], final=True).calls[0].arguments == '{"city": "Paris"}'
    # Consecutive results are one user turn, in order.
    assert messages[3]["content"] == PARSER.result_text("18 C") + "\n" + PARSER.result_text("sunny")
    text = render_chat(TEXT_ONLY, messages)
    assert "[system] " in text and "<tool_response>\n18 C" in text


def test_the_offer_joins_an_existing_system_message():
    messages, _ = prepare_conversation([{"role": "system", "content": "Be brief."}, *CONVERSATION[:1]], TOOLS, False, PARSER)
    assert messages[0]["content"].startswith("Be brief.\n\n") and "get_weather" in messages[0]["content"]
    assert len(messages) == 2
