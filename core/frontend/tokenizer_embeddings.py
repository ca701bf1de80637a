"""The TokenizerManager's embeddings: ``TokenizedEmbeddingReq`` out, ``BatchEmbeddingOutput`` back.

A part of :class:`tercet.frontend.tokenizer_manager.TokenizerManager` (mixed into it),
kept here because it is one concept of its own: it uses the manager's
request table (``rid_to_state``), its sending and releasing of requests,
tokenizing threads and checks, as generation does. Each input is its own
request (``rid#i``), tokenized and measured with the others before any is
sent (:mod:`tercet.frontend.embedding_batch`); a result arrives in one piece,
the vector computed and pooled in the scheduler and passed on by the
detokenizer.
"""

from __future__ import annotations

import asyncio
import uuid

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
from tercet.ipc.messages import BatchEmbeddingOutput
from tercet.model_abilities import NO_POOLING


class EmbeddingRequests:
    def tokenize_embedding_input(self, value: str | list[int], name: str) -> list[int]:
        """One input's tokens (a text with the model's special tokens, [CLS] … [SEP] for BERT;
        token ids as they are), refused if the model cannot take them whole."""
        if isinstance(value, str):
            self.check_prompt_bytes(value, 0, name)
            input_ids = self.tokenizer.encode(value) if value else []
        else:
            input_ids = list(value)
        check_input_length(len(input_ids), self.context_len, name)
        return input_ids

    async def embed(self, request: EmbeddingRequest) -> list[EmbeddingOutput]:
        """One embedding per input, in order. Inputs run as separate requests (``rid#i``) that the
        schedulers batch with any others; the first refusal refuses the request."""
        if not self.abilities.can_embed:
            raise RequestError(NO_POOLING, "model")
        check_num_inputs(request, self.max_prompts_per_request, self.max_requests_in_flight)
        self.check_capacity(len(request.inputs))
        input_ids = await self.run_off_loop(tokenize_inputs, request, self.tokenize_embedding_input)
        self.check_capacity(len(request.inputs))
        rids = input_rids(self.worker.tag(request.rid or uuid.uuid4().hex), request)
        self.check_unused(rids, request.rid)
        event = asyncio.Event()
        states = {rid: ReqState(index, event) for index, rid in enumerate(rids)}
        sent: set[str] = set()
        try:
            self.rid_to_state.update(states)
            for message in input_messages(rids, input_ids):
                self.send_request(message, [message.rid], sent)
            while not all(state.finished for state in states.values()):
                await event.wait()
                event.clear()
            return [self._embedding_of(state.out_list[-1], request) for state in states.values()]
        finally:
            # The caller left: its inputs still waiting need not run.
            for rid in self.release_states(states, sent):
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
            state = self.rid_to_state.get(rid)
            if state is None:  # its caller has gone
                continue
            state.out_list.append(EmbeddingOutput(
                self.worker.untag(rid), state.index, batch.embeddings[position], batch.prompt_tokens[position], batch.refusals[position]
            ))
            state.finished = True
            state.event.set()
