"""The TokenizerManager's prompts: templated, tokenized and measured off the event loop.

A part that :class:`tercet.frontend.tokenizer_manager.TokenizerManager` owns
(``manager.prompts``), one concept of its own: turning a prompt or a
conversation into tokens the model can take, refused when it cannot. It is
built from the tokenizer, the context length and how client text may write
special tokens, and owns the threads that tokenize.

Tokenizing and chat templating run in worker threads: a long prompt takes
seconds to tokenize, and on the event loop those seconds would stall every
stream and health check. Hugging Face fast tokenizers release the GIL while
encoding, so threads are enough.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tercet.context_length import context_length_problem
from tercet.errors import RequestError
from tercet.field_checks import is_integer
from tercet.frontend.io_struct import GenerateRequest
from tercet.tokenizer.content_tokens import ContentTokens, content_tokens_for
from tercet.tokenizer.loading import max_bytes_per_token

Result = TypeVar("Result")


def new_tokenize_pool() -> ThreadPoolExecutor:
    """Threads for tokenizing, one per core this process may use."""
    return ThreadPoolExecutor(max_workers=_num_cpus(), thread_name_prefix="tercet-tokenize")


class PromptTokenizer:
    """Prompts and conversations into tokens for a model of ``context_len`` tokens, on the threads of
    its own ``tokenize_pool``; ``special_tokens_in_content`` is ``[tokenizer] special_tokens_in_content``."""

    def __init__(self, tokenizer, context_len: int, special_tokens_in_content: str):
        self.tokenizer = tokenizer
        self.context_len = context_len
        self.special_tokens_in_content = special_tokens_in_content
        self.vocab_size: int = len(tokenizer)
        # None when the tokenizer allows no bound: prompts are then only measured by tokenizing.
        self.max_bytes_per_token: int | None = max_bytes_per_token(tokenizer)
        self.tokenize_pool: ThreadPoolExecutor = new_tokenize_pool()

    def close(self) -> None:
        self.tokenize_pool.shutdown(wait=False, cancel_futures=True)

    @functools.cached_property
    def content_tokens(self) -> ContentTokens | None:
        """How a conversation's client text is tokenized; None: it may write control tokens
        (``[tokenizer] special_tokens_in_content = "parse"``). Made on first use, in a tokenizing thread."""
        return content_tokens_for(self.tokenizer, self.special_tokens_in_content)

    async def run_off_loop(self, function: Callable[..., Result], *args) -> Result:
        """``function(*args)`` in a tokenizing thread, so the event loop keeps serving meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.tokenize_pool, function, *args)

    async def tokenize_chat(
        self, messages: list[dict], max_new_tokens: int | None = 0, tools: list[dict] | None = None,
        generation_prefix: str = "",
    ) -> list[int]:
        """:meth:`apply_chat_template` off the event loop."""
        return await self.run_off_loop(self.apply_chat_template, messages, max_new_tokens, tools, generation_prefix)

    def apply_chat_template(
        self, messages: list[dict], max_new_tokens: int | None = 0, tools: list[dict] | None = None,
        generation_prefix: str = "",
    ) -> list[int]:
        """The conversation's prompt tokens (``tools`` for a template that renders
        them, ``generation_prefix`` after the generation prompt); ``max_new_tokens``
        None only counts them, however many, where a number refuses a conversation
        that leaves no room for that many. Blocks for as long as tokenizing takes:
        from the event loop, await :meth:`tokenize_chat` instead."""
        content_tokens = self.content_tokens
        if content_tokens is not None:  # the clients' special-token text, kept apart from the template's
            messages, tools = content_tokens.escaped(messages), content_tokens.escaped(tools)
        try:
            text = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        except Exception as error:  # template errors are the request's fault
            raise RequestError(f"messages could not be formatted with the chat template: {error}", "messages") from None
        text += generation_prefix
        # Rendering is quick string work; measuring the rendered text (not the
        # messages' contents, which a template may trim or leave out) keeps the
        # bound sound before the slow part. The template writes the special
        # tokens itself, as apply_chat_template(tokenize=True) does.
        self.check_prompt_bytes(text, max_new_tokens, "messages")
        if content_tokens is not None:
            return content_tokens.encode(text)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def tokenize(self, request: GenerateRequest) -> list[int]:
        """The prompt tokens of a single-prompt request, refused if they leave no
        room for its max_new_tokens. Blocks for as long as tokenizing takes;
        the manager's ``generate`` runs it off the event loop."""
        max_new_tokens = request.sampling_params.max_new_tokens
        if request.input_ids is not None:
            input_ids = list(request.input_ids)
            self.check_length(len(input_ids), max_new_tokens)  # before looking at each of a million ids
            if not all(is_integer(t) and 0 <= t < self.vocab_size for t in input_ids):
                raise RequestError(f"input_ids must be integers in [0, {self.vocab_size})", "input_ids")
        elif isinstance(request.text, str):
            self.check_prompt_bytes(request.text, max_new_tokens, "prompt")
            input_ids = self.tokenizer.encode(request.text)
        else:
            raise RequestError("a prompt is required: text or input_ids", "prompt")
        if not input_ids:
            raise RequestError("the prompt is empty", "prompt")
        self.check_length(len(input_ids), max_new_tokens)
        return input_ids

    def check_prompt_bytes(self, text: str, max_new_tokens: int | None, param: str) -> None:
        """Refuse text that cannot be tokenized, or that is too long by its size alone
        (``max_new_tokens`` None: text only counted, which no length bounds)."""
        try:
            num_bytes = len(text.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise RequestError(f"the {param} is not valid Unicode text: {error.reason} at position {error.start}",
                               param) from None
        if self.max_bytes_per_token is None or max_new_tokens is None:
            return
        fewest_tokens = -(-num_bytes // self.max_bytes_per_token)
        if fewest_tokens + max_new_tokens > self.context_len:
            # A max_tokens that leaves no room for any prompt is that field's fault, whatever the prompt.
            blamed = "max_tokens" if max_new_tokens >= self.context_len else param
            # None is reserved for an answer when the client sent no max_tokens: then only the prompt is named.
            answer = f" plus max_tokens ({max_new_tokens})" if max_new_tokens else ""
            raise RequestError(
                f"the prompt ({num_bytes} bytes, so at least {fewest_tokens} tokens){answer} exceeds the "
                f"model's context length of {self.context_len} tokens",
                blamed,
            )

    def check_length(self, num_prompt_tokens: int, max_new_tokens: int) -> None:
        problem = context_length_problem(num_prompt_tokens, max_new_tokens, self.context_len)
        if problem is not None:
            raise RequestError(problem, "max_tokens")


def _num_cpus() -> int:
    # The cores this process may run on, not the machine's (a container or taskset may allow fewer).
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
