"""The TokenizerManager's embeddings: ``TokenizedEmbeddingReq`` out, ``BatchEmbeddingOutput`` back.

A part that :class:`tercet.frontend.tokenizer_manager.TokenizerManager` owns
(``manager.embeddings``), one concept of its own. An embedding request goes the
way of a generation: through the manager's request table (``rid_to_state``) and
its sending and releasing of requests (:class:`RequestBook`, what this part
uses of the manager), tokenized and measured by the prompts part. Each input is
its own request (``rid#i``), tokenized and measured with the others before any
is sent (:mod:`tercet.frontend.embedding_batch`); a result arrives in one piece,
the vector computed and pooled in the scheduler and passed on by the
detokenizer. What the model can do (whether it embeds at all) the manager checks
before it hands a request here.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Protocol

from tercet.containment import ContainedFailures
from tercet.errors import RequestError
from tercet.frontend.embedding_batch import (
    check_input_length,
    check_num_inputs,
    input_messages,
    input_rids,
    tokenize_inputs,
)
from tercet.frontend.io_struct import EmbeddingOutput, EmbeddingRequest
from tercet.frontend.req_state import ReqState
from tercet.frontend.tokenizer_prompts import PromptTokenizer
from tercet.ipc.messages import BatchEmbeddingOutput
from tercet.ipc.result_routes import ApiWorker
from tercet.metrics.serving_metrics import ServingMetrics


class RequestBook(Protocol):
    """The manager's request table and limits, as generation uses them too."""

    rid_to_state: dict[str, ReqState]
    max_prompts_per_request: int
    max_requests_in_flight: int

    def check_capacity(self, num_choices: int) -> None: ...

    def check_unused(self, ids: list[str], rid: str | None) -> None: ...

    def send_request(self, message, ids: list[str], sent: set[str]) -> None: ...

    def release_states(self, states: dict[str, ReqState], sent: set[str]) -> list[str]: ...


class EmbeddingRequests:
    """Embedding requests through ``requests`` (the manager), their inputs tokenized by ``prompts``;
    ``metrics`` observes their results, ``failures`` counts what observing them costs, ``worker`` tags their ids."""

    def __init__(self, requests: RequestBook, prompts: PromptTokenizer, metrics: ServingMetrics,
                 failures: ContainedFailures, worker: ApiWorker):
        self.requests = requests
        self.prompts = prompts
        self.metrics = metrics
        self.failures = failures
        self.worker = worker

    def tokenize_input(self, value: str | list[int], name: str) -> list[int]:
        """One input's tokens (a text with the model's special tokens, [CLS] … [SEP] for BERT;
        token ids as they are), refused if the model cannot take them whole."""
        if isinstance(value, str):
            self.prompts.check_prompt_bytes(value, 0, name)
            input_ids = self.prompts.tokenizer.encode(value) if value else []
        else:
            input_ids = list(value)
        check_input_length(len(input_ids), self.prompts.context_len, name)
        return input_ids

    async def embed(self, request: EmbeddingRequest) -> list[EmbeddingOutput]:
        """One embedding per input, in order. Inputs run as separate requests (``rid#i``) that the
        schedulers batch with any others; the first refusal refuses the request."""
        requests = self.requests
        check_num_inputs(request, requests.max_prompts_per_request, requests.max_requests_in_flight)
        requests.check_capacity(len(request.inputs))
        input_ids = await self.prompts.run_off_loop(tokenize_inputs, request, self.tokenize_input)
        requests.check_capacity(len(request.inputs))
        rids = input_rids(self.worker.tag(request.rid or uuid.uuid4().hex), request)
        requests.check_unused(rids, request.rid)
        event = asyncio.Event()
        states = {rid: ReqState(index, event) for index, rid in enumerate(rids)}
        sent: set[str] = set()
        try:
            requests.rid_to_state.update(states)
            for message in input_messages(rids, input_ids):
                requests.send_request(message, [message.rid], sent)
            while not all(state.finished for state in states.values()):
                await event.wait()
                event.clear()
            return [self._embedding_of(state.out_list[-1], request) for state in states.values()]
        finally:
            # The caller left: its inputs still waiting need not run.
            for rid in requests.release_states(states, sent):
                self.metrics.abandoned(rid)

    @staticmethod
    def _embedding_of(piece, request: EmbeddingRequest) -> EmbeddingOutput:
        # A piece that is not an embedding is a request ended here (a child died, the server stops).
        refusal = piece.refusal if isinstance(piece, EmbeddingOutput) else piece.finish_reason
        if refusal is not None:
            param = refusal.param
            if param == "input":
                param = request.input_name(piece.index)
            # An abort without a status (/abort_request) is the server's doing, not the request's.
            raise RequestError(refusal.message or "the input was not embedded", param, refusal.status_code or 503)
        return piece

    def handle_batch_embedding_output(self, batch: BatchEmbeddingOutput) -> None:
        for position, rid in enumerate(batch.rids):
            # As for generation: a failure of /metrics must not cost the batch its outputs.
            try:
                self.metrics.embedded(rid, batch.prompt_tokens[position], batch.refusals[position] is not None)
            except Exception:
                self.failures.record("metrics", f"observing embedding input {rid!r} for /metrics failed")
            state = self.requests.rid_to_state.get(rid)
            if state is None:  # its caller has gone
                continue
            state.out_list.append(EmbeddingOutput(
                self.worker.untag(rid), state.index, batch.embeddings[position], batch.prompt_tokens[position], batch.refusals[position]
            ))
            state.finished = True
            state.event.set()
