"""Embedding requests in the scheduler: checked on arrival, run in batches, one forward each.

An embedding needs no decoding: its input runs once, whole, and its final
hidden states are pooled (:mod:`tercet.model.pooling`) here, in the scheduler
process, so only one vector per input crosses to the detokenizer (which
passes it on to the TokenizerManager as it came). Each step takes the oldest
waiting inputs, as many as fit ``[scheduler] chunked_prefill_size`` tokens of
padded batch (inputs × the longest one: what attention computes over), and at
most ``max_running_requests`` of them, and runs them in one forward.

A decoder's forward writes K/V, so its inputs borrow table rows and pages
from the KV memory for that forward and give them back right after; inputs
that do not fit beside the running generations wait for a later step. An
encoder needs no KV at all. The inputs wait, and their results wait to be
sent, in :class:`tercet.scheduler.request_queues.RequestQueues`, where
aborts find them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tercet.errors import RequestError
from tercet.ipc.messages import BatchEmbeddingOutput, FinishKind, FinishReason, TokenizedEmbeddingReq
from tercet.model_abilities import NO_POOLING
from tercet.scheduler.req import EmbeddingReq

if TYPE_CHECKING:
    import torch

    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.request_queues import EmbeddingRow, RequestQueues


def check_embedding_request(message: TokenizedEmbeddingReq, model_runner) -> None:
    """Raise :class:`RequestError` naming what the scheduler cannot embed (as
    :func:`tercet.scheduler.intake.check_generate_request` does for generation)."""
    if model_runner.pooling is None:
        raise RequestError(NO_POOLING, "model")
    if not message.rid:
        raise RequestError("the request id is empty", "rid")
    if not message.input_ids:
        raise RequestError("the input is empty", "input")
    vocab_size = model_runner.vocab_size
    if not all(0 <= token_id < vocab_size for token_id in message.input_ids):
        raise RequestError(f"input token ids must be in [0, {vocab_size})", "input")
    if len(message.input_ids) > model_runner.context_len:
        raise RequestError(
            f"the input has {len(message.input_ids)} tokens, more than the model's {model_runner.context_len}", "input"
        )


class EmbeddingStep:
    def __init__(self, model_runner, kv_memory: "RequestKVMemory", queues: "RequestQueues", timer, *,
                 token_budget: int, max_batch_size: int):
        self.model_runner = model_runner
        self.kv_memory = kv_memory
        self.queues = queues
        self.timer = timer
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size

    def handle(self, message: TokenizedEmbeddingReq) -> None:
        req = EmbeddingReq(message.rid, list(message.input_ids))
        try:
            check_embedding_request(message, self.model_runner)
        except RequestError as error:
            reason = FinishReason(
                FinishKind.ABORT, message=error.message, status_code=error.status_code, param=error.param
            )
            self.queues.end_embedding(req, refusal=reason)
            return
        self.queues.enqueue_embedding(req)

    def num_fitting(self) -> int:
        """How many of the oldest waiting inputs fit one step (the first always does, for the token budget)."""
        uses_kv = self.model_runner.can_generate
        free_rows = self.kv_memory.req_to_token_pool.num_free if uses_kv else self.max_batch_size
        free_pages = self.kv_memory.num_available_pages if uses_kv else 0
        count = longest = num_pages = 0
        for req in self.queues.waiting_embeddings:
            length = len(req.input_ids)
            if count and (count + 1) * max(longest, length) > self.token_budget:
                break
            if count >= min(free_rows, self.max_batch_size):
                break
            if uses_kv:
                num_pages += self.kv_memory.pages_for(length)
                if num_pages > free_pages:
                    break
            count += 1
            longest = max(longest, length)
        return count

    def run(self) -> None:
        from tercet.model.host_copy import copy_to_host

        with self.timer.stage("schedule"):
            sequences = [req.input_ids for req in self.queues.waiting_embeddings[:self.num_fitting()]]
        if not sequences:
            return
        with self.timer.stage("forward"):
            vectors = self.embed(sequences)
            if vectors is None:  # num_fitting counted what fits, so this is not expected; they wait instead
                return
            # Little-endian float32, the bytes OpenAI's base64 encoding carries.
            rows = copy_to_host(vectors.float()).numpy().astype("<f4")
        # The inputs leave the queue once embedded.
        for req, row in zip(self.queues.take_embeddings(len(sequences)), rows):
            self.queues.end_embedding(req, row.tobytes())

    def embed(self, sequences: list[list[int]]) -> torch.Tensor | None:
        """The pooled vectors of ``sequences``; on a decoder they borrow KV rows and pages for
        their forward (None, with nothing run, when those are not free)."""
        if not self.model_runner.can_generate:
            return self.model_runner.embed(sequences)
        loans = self.kv_memory.lend([len(sequence) for sequence in sequences])
        if loans is None:
            return None
        try:
            return self.model_runner.embed(sequences, [row for row, _ in loans])
        finally:
            self.kv_memory.take_back(loans)


def send_embedding_outputs(rows: list["EmbeddingRow"], sender) -> None:
    """One BatchEmbeddingOutput of ``rows``."""
    rids, embeddings, prompt_tokens, refusals = (list(column) for column in zip(*rows))
    sender.send(BatchEmbeddingOutput(rids, embeddings, prompt_tokens, refusals))
