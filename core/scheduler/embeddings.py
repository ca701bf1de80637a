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
encoder needs no KV at all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tercet.errors import RequestError
from tercet.ipc.messages import BatchEmbeddingOutput, FinishReason, TokenizedEmbeddingReq
from tercet.model_abilities import NO_POOLING

if TYPE_CHECKING:
    from tercet.scheduler.kv_memory import RequestKVMemory


@dataclass(frozen=True)
class EmbeddingReq:
    rid: str
    input_ids: list[int]


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
    def __init__(self, model_runner, kv_memory: "RequestKVMemory", timer, *, token_budget: int, max_batch_size: int):
        self.model_runner = model_runner
        self.kv_memory = kv_memory
        self.timer = timer
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.waiting: deque[EmbeddingReq] = deque()
        # Rows of the next BatchEmbeddingOutput: (rid, vector bytes, prompt tokens, refusal).
        self.unsent: list[tuple[str, bytes, int, FinishReason | None]] = []

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def handle(self, message: TokenizedEmbeddingReq) -> None:
        try:
            check_embedding_request(message, self.model_runner)
        except RequestError as error:
            reason = FinishReason("abort", message=error.message, status_code=error.status_code, param=error.param)
            self.unsent.append((message.rid, b"", len(message.input_ids), reason))
            return
        self.waiting.append(EmbeddingReq(message.rid, list(message.input_ids)))

    def abort(self, rid: str) -> None:
        """Drop a waiting input (once running, it finishes within the step)."""
        for req in [req for req in self.waiting if req.rid == rid]:
            self.waiting.remove(req)
            self.unsent.append((req.rid, b"", len(req.input_ids), FinishReason("abort", message="aborted")))

    def abort_all(self, reason: FinishReason) -> int:
        aborted = len(self.waiting)
        while self.waiting:
            req = self.waiting.popleft()
            self.unsent.append((req.rid, b"", len(req.input_ids), reason))
        return aborted

    def take_batch(self) -> list[EmbeddingReq]:
        """The oldest waiting inputs that fit one step (the first always does, for the token budget)."""
        uses_kv = self.model_runner.can_generate
        free_rows = self.kv_memory.req_to_token_pool.num_free if uses_kv else self.max_batch_size
        free_pages = self.kv_memory.num_available_pages if uses_kv else 0
        batch: list[EmbeddingReq] = []
        longest = num_pages = 0
        for req in self.waiting:
            length = len(req.input_ids)
            if batch and (len(batch) + 1) * max(longest, length) > self.token_budget:
                break
            if len(batch) >= min(free_rows, self.max_batch_size):
                break
            if uses_kv:
                num_pages += self.kv_memory.pages_for(length)
                if num_pages > free_pages:
                    break
            batch.append(req)
            longest = max(longest, length)
        for _ in batch:
            self.waiting.popleft()
        return batch

    def run(self) -> None:
        with self.timer.stage("schedule"):
            batch = self.take_batch()
        if not batch:
            return
        sequences = [req.input_ids for req in batch]
        with self.timer.stage("forward"):
            if self.model_runner.can_generate:
                loans = self.kv_memory.lend([len(sequence) for sequence in sequences])
                if loans is None:  # take_batch counted what fits, so this is not expected; wait instead
                    self.waiting.extendleft(reversed(batch))
                    return
                try:
                    vectors = self.model_runner.embed(sequences, [row for row, _ in loans])
                finally:
                    self.kv_memory.take_back(loans)
            else:
                vectors = self.model_runner.embed(sequences)
            # Little-endian float32, the bytes OpenAI's base64 encoding carries.
            rows = vectors.float().cpu().numpy().astype("<f4")
        for req, row in zip(batch, rows):
            self.unsent.append((req.rid, row.tobytes(), len(req.input_ids), None))

    def send(self, sender) -> None:
        if not self.unsent:
            return
        rows, self.unsent = self.unsent, []
        rids, embeddings, prompt_tokens, refusals = (list(column) for column in zip(*rows))
        sender.send(BatchEmbeddingOutput(rids, embeddings, prompt_tokens, refusals))
