"""A stand-in TokenizerManager for the HTTP tests: it plays scripted outputs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import tempfile
from types import SimpleNamespace

import httpx

from tercet.config import TercetConfig
from tercet.containment import ContainedFailures
from tercet.formats.pooling_spec import Pooling
from tercet.frontend.chat_tools import ChatTools
from tercet.frontend.io_struct import EmbeddingOutput, EmbeddingRequest, GenerateOutput, GenerateRequest
from tercet.http.server.app import create_app
from tercet.http.server.plugin_routes import installed_route_registrations
from tercet.ipc.control_messages import ControlReply
from tercet.ipc.messages import FinishReason, TokenLogprobs
from tercet.model_abilities import ModelAbilities
from tercet.plugin_host.http_route import http_route_registration
from tercet.plugin_host.manager import Registration
from tercet.plugins.hermes_tool_parser import HermesToolCallParser

MODEL = "stand-in-model"
HANG = object()
TEXT_ONLY_TEMPLATE = "{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}"  # script item: wait until cancelled or closed


def piece(text, token_ids, finish=None, completion_tokens=None, **fields) -> GenerateOutput:
    return GenerateOutput("", text, token_ids, finish, prompt_tokens=3, completion_tokens=completion_tokens or 0, **fields)


# The stand-in vocabulary: token id -> its text.
VOCAB = {1: "Say", 2: "<eos>", 3: " it", 5: "Hel", 6: "l", 7: "o", 8: "!"}


class StandInTokenizer:
    def decode(self, token_ids, skip_special_tokens=False):
        return "".join(VOCAB.get(t, f"<{t}>") for t in token_ids)

    def convert_ids_to_tokens(self, token_ids):
        return VOCAB.get(token_ids) if isinstance(token_ids, int) else [VOCAB.get(t) for t in token_ids]

    def encode(self, text, add_special_tokens=True):
        return []


STOP = FinishReason("stop", matched_token=2)
STREAMED = [piece("Hel", [5, 6], completion_tokens=2), piece("lo", [7], STOP, completion_tokens=3)]
WHOLE = [piece("Hello", [5, 6, 7], FinishReason("length"), completion_tokens=3)]


class ScriptedOutputs:
    """What the stand-in's ``generate`` returns: scripted pieces, errors or a hang."""

    def __init__(self, rid: str, script: list):
        self.rid = rid
        self.script = list(script)
        self.aclose_calls = 0

    def __aiter__(self):
        return self

    async def __anext__(self) -> GenerateOutput:
        if self.aclose_calls or not self.script:
            raise StopAsyncIteration
        item = self.script.pop(0)
        if item is HANG:
            await asyncio.Event().wait()
        if isinstance(item, BaseException):
            raise item
        return dataclasses.replace(item, rid=self.rid)

    async def aclose(self) -> None:
        self.aclose_calls += 1


# What the stand-in's embed gives every input: [1, -2, 0.5, 0] as little-endian float32.
EMBEDDING = b"\x00\x00\x80?\x00\x00\x00\xc0\x00\x00\x00?\x00\x00\x00\x00"


class StandInTokenizerManager:
    served_model_name = MODEL
    # No LoRA adapters: a model name other than MODEL is a 404 at the HTTP edge.
    serves_lora = False
    context_len = 64
    # The default configuration (the control routes read [server] from it), but for profile_dir:
    # a /start_profile sent here makes its directory in the temporary directory, not in the user's home.
    context = SimpleNamespace(config=TercetConfig().replace(
        "server", profile_dir=os.path.join(tempfile.gettempdir(), "tercet-stand-in-profiles")))
    vocab_size = 100
    tokenizer = StandInTokenizer()
    # A decoder that also embeds (4 dimensions).
    abilities = ModelAbilities(can_generate=True, pooling=Pooling("mean", True, "stand-in"), embedding_size=4)

    def __init__(self, script: list | None = None, healthy: bool = True, answers_logprobs: bool = False):
        self.script = script
        # Whether unscripted pieces carry the log-probabilities a request asks for, as a scheduler's do (by
        # default they carry none, so that a route's handling of a server that fails to send them shows).
        self.answers_logprobs = answers_logprobs
        self.healthy = healthy
        self.failures = ContainedFailures("server")
        self.requests: list[GenerateRequest] = []
        self.templated: list[list[dict]] = []
        self.generation_prefixes: list[str] = []
        # The built-in parser, with a template that cannot render tools (as the default model's).
        self.chat_tools = ChatTools(HermesToolCallParser(), "hermes_tool_parser", self.failures, TEXT_ONLY_TEMPLATE)
        self.reasoning = None  # no reasoning parser, as by default
        self.outputs: list[ScriptedOutputs] = []
        self.controls: list[type] = []  # control request types, in the order asked
        self.rank_of_rid: dict[str, int] = {}
        self.embedded: list[EmbeddingRequest] = []

    async def tokenize_chat(
        self, messages: list[dict], max_new_tokens: int = 0, tools=None, generation_prefix: str = ""
    ) -> list[int]:
        self.templated.append(messages)
        self.generation_prefixes.append(generation_prefix)
        return [1] * (4 * len(messages))

    def generate(self, request: GenerateRequest) -> ScriptedOutputs:
        self.requests.append(request)
        script = self.script
        if script is None:  # the same pieces for every completion (n of each prompt)
            pieces = STREAMED if request.stream else WHOLE
            if self.answers_logprobs:
                pieces = answered_logprobs(pieces, request.sampling_params)
            script = [dataclasses.replace(p, index=i) for i in range(request.num_completions) for p in pieces]
        self.outputs.append(ScriptedOutputs(request.rid or "rid-0", script))
        return self.outputs[-1]

    async def embed(self, request: EmbeddingRequest) -> list[EmbeddingOutput]:
        self.embedded.append(request)
        return [EmbeddingOutput(f"e{index}", index, EMBEDDING, prompt_tokens=2) for index in range(len(request.inputs))]

    def is_healthy(self) -> bool:
        return self.healthy

    async def control(self, request_type: type, **fields) -> list[ControlReply]:
        """One rank, which does whatever it is asked."""
        self.controls.append(request_type)
        return [ControlReply("stand-in", 0, True)]

    def abort(self, rid: str) -> bool:
        return rid in self.rank_of_rid

    async def abort_request(self, rid: str) -> bool:
        """As one API worker: the request or any of its completions held here."""
        return any([self.abort(held) for held in self.rank_of_rid if held == rid or held.startswith(rid + "#")])

    def api_workers(self) -> list[dict]:
        return [{"worker": 1, "pid": 1, "is_this_one": True}]


def with_routes(*routes: tuple, plugin_name: str = "test_plugin") -> list[Registration]:
    """Every installed plugin's routes, and ``routes`` (``register``'s arguments, its keyword arguments
    a dict at the end) as if ``plugin_name`` registered them."""
    added = []
    for route in routes:
        *arguments, keywords = route if isinstance(route[-1], dict) else (*route, {})
        added.append(Registration(*http_route_registration(*arguments, **keywords), plugin_name))
    return [*installed_route_registrations(), *added]


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")


async def post(body, path="/v1/completions", manager=None, **app_options) -> httpx.Response:
    async with client_for(create_app(manager or StandInTokenizerManager(), **app_options)) as client:
        # json.dumps escapes to ASCII, so a lone surrogate travels as JSON's "\ud800" (httpx's json= cannot).
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return await client.post(path, content=content, headers={"content-type": "application/json"})


def sse_events(response: httpx.Response) -> list[dict]:
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [block for block in response.text.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in blocks)
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]



PROMPT_LOGPROBS = TokenLogprobs([1, 3], [None, -0.75], [[], [[3, -0.75], [8, -1.0]]])


def with_logprobs(output: GenerateOutput, top=None) -> GenerateOutput:
    """``output`` with made-up log-probabilities for its tokens: -0.5 each."""
    logprobs = [-0.5] * len(output.token_ids)
    tops = [[[token_id, -0.5], [8, -2.0]] for token_id in output.token_ids] if top is None else top
    return dataclasses.replace(output, output_logprobs=TokenLogprobs(list(output.token_ids), logprobs, tops))


def answered_logprobs(pieces: list[GenerateOutput], sampling_params) -> list[GenerateOutput]:
    """``pieces`` with the log-probabilities ``sampling_params`` ask for: the output's, and the prompt's
    (PROMPT_LOGPROBS) on the first piece."""
    if sampling_params.return_logprob:
        pieces = [with_logprobs(piece) for piece in pieces]
    if sampling_params.return_prompt_logprob:
        pieces = [dataclasses.replace(pieces[0], prompt_logprobs=PROMPT_LOGPROBS,
                                      prompt_token_ids=list(PROMPT_LOGPROBS.token_ids)), *pieces[1:]]
    return pieces
