"""/v1/messages/count_tokens on the real TokenizerManager: any prompt up to the body limit is counted."""

from __future__ import annotations

import asyncio

import pytest
from http_stand_in import post

from tercet.errors import RequestError
from tercet.frontend.tokenizer_manager import TokenizerManager

pytestmark = pytest.mark.anyio


@pytest.fixture
def manager(tokenizer_manager_alone):
    # No scheduler listens: counting sends nothing to one.
    return tokenizer_manager_alone


def templated_length(manager: TokenizerManager, messages: list[dict]) -> int:
    return len(manager.tokenizer.apply_chat_template(messages, add_generation_prompt=True))


@pytest.mark.parametrize("too_long_by", ["tokens", "bytes"])
async def test_a_prompt_longer_than_the_context_is_counted(manager, too_long_by):
    # By its tokens, not by its bytes; or by its bytes alone (which once was a 400 citing a max_tokens of 1).
    text = "abc " * 3000 if too_long_by == "tokens" else "x" * ((manager.context_len + 1) * manager.max_bytes_per_token)
    messages = [{"role": "user", "content": text}]
    response = await post({"messages": messages}, "/v1/messages/count_tokens", manager)
    assert response.status_code == 200, response.text
    assert response.json()["input_tokens"] == templated_length(manager, messages) > manager.context_len


async def test_count_tokens_still_checks_the_body(manager):
    response = await post({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": {"type": []}},
                          "/v1/messages/count_tokens", manager)
    assert response.status_code == 400 and "tool_choice.type" in response.json()["error"]["message"]


def test_a_conversation_too_long_without_max_tokens_names_only_the_prompt(manager):
    text = "x" * ((manager.context_len + 1) * manager.max_bytes_per_token)
    with pytest.raises(RequestError) as refused:
        asyncio.run(manager.tokenize_chat([{"role": "user", "content": text}], 0))
    assert refused.value.param == "messages" and "max_tokens" not in refused.value.message
