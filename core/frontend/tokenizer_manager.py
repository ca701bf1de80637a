"""The TokenizerManager: the API side of every request, in the main process.

It tokenizes, sends ``TokenizedGenerateReq`` to the scheduler, and keeps a
``ReqState`` per completion id until the caller has consumed the last output;
an asyncio loop receives ``BatchStrOutput`` from the detokenizer and wakes the
waiting callers. It owns three parts of their own, each built with what it
uses: ``prompts``, tokenized off the event loop
(:class:`tercet.frontend.tokenizer_prompts.PromptTokenizer`); ``embeddings``,
which go the same way as generation, through this manager's request table
(:class:`tercet.frontend.tokenizer_embeddings.EmbeddingRequests`); and the
``control_plane`` (:class:`tercet.frontend.tokenizer_control.ControlPlane`).
The HTTP layer calls this manager only: its methods of those parts' concern
(``tokenize_chat``, ``embed``, ``control``…) hand the call on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import AsyncIterator

from tercet.containment import ContainedFailures
from tercet.errors import RequestError
from tercet.frontend.chat_tools import ChatTools
from tercet.frontend.completion_outputs import outputs_as_they_come
from tercet.frontend.constraint_size import check_constraint_size
from tercet.frontend.data_parallel_router import DataParallelRouter
from tercet.frontend.io_struct import EmbeddingOutput, EmbeddingRequest, GenerateOutput, GenerateRequest
from tercet.frontend.prompt_batch import batch_limit, check_batch_size, prompt_messages, prompt_rids, tokenize_prompts
from tercet.frontend.req_state import ReqState
from tercet.frontend.request_traces import RequestTracer, unix_now
from tercet.frontend.tokenizer_control import ControlPlane
from tercet.frontend.tokenizer_embeddings import EmbeddingRequests
from tercet.frontend.tokenizer_prompts import PromptTokenizer
from tercet.ipc.control_messages import AbortRequestsReq, ControlReply, ControlRequest
from tercet.ipc.eviction_reports import EvictedPrefixesReport
from tercet.ipc.messages import (
    BatchEmbeddingOutput,
    BatchStrOutput,
    ContainedFailureReport,
    FinishKind,
    FinishReason,
    choice_rid,
)
from tercet.ipc.rank_metrics import RankMetricsReport
from tercet.ipc.result_routes import ApiWorker
from tercet.metrics.serving_metrics import ServingMetrics
from tercet.metrics.stage_timer import stage_timer
from tercet.model_abilities import ENCODER_CANNOT_GENERATE, NO_POOLING, ModelAbilities
from tercet.processes.context import ProcessContext
from tercet.processes.manager_io import ManagerIO
from tercet.reasoning.reader import ReasoningReader

logger = logging.getLogger(__name__)
EDGE_TO_TOKENIZER = "edge 3 (detokenizer and schedulers -> TokenizerManager)"


class TokenizerManager:
    def __init__(self, context: ProcessContext, port_args, tokenizer, served_model_name: str, context_len: int,
                 abilities: ModelAbilities | None = None, worker: ApiWorker = ApiWorker()):
        self.context = context
        # Which of the server's API workers this is: its tag on every id it sends brings the results back here.
        self.worker = worker
        # What the model can do (its scheduler said when it came up): generate, embed or both.
        self.abilities = abilities or ModelAbilities()
        self.tokenizer = tokenizer
        self.served_model_name = served_model_name
        self.context_len = context_len
        self.vocab_size = len(tokenizer)
        self.prompts = PromptTokenizer(tokenizer, context_len, context.config.tokenizer.special_tokens_in_content)
        scheduler_config = context.config.scheduler
        # Requests the server holds at once: a full batch plus the waiting queue.
        self.max_requests_in_flight = scheduler_config.max_running_requests + scheduler_config.max_queued_requests
        self.max_prompts_per_request = context.config.server.max_prompts_per_request
        self.io = ManagerIO(context, "tokenizer", EDGE_TO_TOKENIZER)
        # This process's contained failures (the control plane counts those the detokenizer reports).
        self.failures = ContainedFailures("server", logger)
        self.router = self.data_parallel_router(port_args.scheduler_inputs)
        # What /metrics publishes of the requests (observed here, as their outputs arrive).
        self.metrics = ServingMetrics(served_model_name, self.router.num_ranks, context_len, worker.number,
                                      port_args.shared_metrics_dir if worker.count > 1 else None)
        # Tool calls are found in chat answers here, in the API process.
        self.chat_tools = ChatTools.create(context, tokenizer, self.failures)
        self.reasoning = ReasoningReader.create(context, self.failures)  # None: [reasoning] parser = "none"
        # Each finished completion's spans, exported over OTLP; None: [observability] otlp_endpoint unset.
        self.traces = RequestTracer.create(context.config.observability, served_model_name)
        self.receiver = self.io.open_async_receiver(port_args.tokenizer_inputs[worker.number - 1], self.failures)
        self.rid_to_state: dict[str, ReqState] = {}
        # Embeddings go through this manager's request table, as generation does.
        self.embeddings = EmbeddingRequests(self, self.prompts, self.metrics, self.failures, worker)
        self.control_plane = ControlPlane(self.router, worker, self.metrics, self.failures)
        self.io.set_handlers([
            (BatchStrOutput, self.handle_batch_str_output),
            (BatchEmbeddingOutput, self.embeddings.handle_batch_embedding_output),
            (ControlReply, self.control_plane.handle_control_reply),
            (ContainedFailureReport, self.control_plane.handle_contained_failure_report),
            (RankMetricsReport, self.control_plane.handle_rank_metrics_report),
            (EvictedPrefixesReport, self.router.handle_eviction_report),
            *self.io.plugin_handlers(lambda: self),
        ])
        self.unhealthy_reason: str | None = None
        # Receiving (and decoding) happens while awaiting, so only dispatch is timed here.
        self.timer = stage_timer("tokenizer", context.config.server.profile_interval, logger)
        # Set on SIGTERM: new requests are refused while those in flight finish.
        self.is_draining = False
        self.handle_loop_task: asyncio.Task | None = None

    def data_parallel_router(self, scheduler_inputs: list[str]) -> DataParallelRouter:
        """A sender to each rank, behind the load balancer ``[scheduler] load_balance`` chooses."""
        balancer = self.context.chosen("load_balancers")(self.context.config, len(scheduler_inputs))
        return DataParallelRouter([self.io.open_sender(endpoint) for endpoint in scheduler_inputs], balancer,
                                  self.failures, self.context.chosen_plugin_name("load_balancers"))

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        self.handle_loop_task = asyncio.get_running_loop().create_task(self.handle_loop())

    async def handle_loop(self) -> None:
        await self.io.dispatch_forever(self.timer)

    def close(self) -> None:
        if self.handle_loop_task is not None:
            self.handle_loop_task.cancel()
        self.io.close()
        self.prompts.close()
        if self.traces is not None:
            self.traces.shutdown()

    def is_healthy(self) -> bool:
        return self.unhealthy_reason is None

    @property
    def serves_lora(self) -> bool:
        """Whether requests may name LoRA adapters (the schedulers know which are loaded)."""
        return self.context.config.lora.is_on

    @property
    def num_requests_in_flight(self) -> int:
        """Completions whose caller has not consumed their last output yet."""
        return len(self.rid_to_state)

    # -- the parts' calls, as the HTTP layer makes them -------------------------

    @property
    def max_bytes_per_token(self) -> int | None:
        """The most prompt bytes one token stands for (None: no bound holds), as the prompts part measures."""
        return self.prompts.max_bytes_per_token

    async def tokenize_chat(
        self, messages: list[dict], max_new_tokens: int | None = 0, tools: list[dict] | None = None,
        generation_prefix: str = "",
    ) -> list[int]:
        """A conversation's prompt tokens, templated off the event loop (:meth:`PromptTokenizer.tokenize_chat`)."""
        return await self.prompts.tokenize_chat(messages, max_new_tokens, tools, generation_prefix)

    async def embed(self, request: EmbeddingRequest) -> list[EmbeddingOutput]:
        """One embedding per input, in order (:meth:`EmbeddingRequests.embed`), where the model embeds."""
        if not self.abilities.can_embed:
            raise RequestError(NO_POOLING, "model")
        return await self.embeddings.embed(request)

    async def control(self, request_type: type[ControlRequest], timeout: float = 30.0, mode: str = "serial",
                      **fields) -> list[ControlReply]:
        """One control request to every rank; their replies, sorted by rank (:meth:`ControlPlane.control`)."""
        return await self.control_plane.control(request_type, timeout, mode, **fields)

    @property
    def worker_pids(self) -> dict[int, int]:
        """Every API worker's process id, by number (the main process tells them all once they listen)."""
        return self.control_plane.worker_pids

    @worker_pids.setter
    def worker_pids(self, pids: dict[int, int]) -> None:
        self.control_plane.worker_pids = pids

    def api_workers(self) -> list[dict]:
        """The server's API workers, for /get_server_info."""
        return self.control_plane.api_workers()

    def contained_failures(self) -> dict:
        """This process's and the detokenizer's counts, for /get_server_info (each rank reports its own)."""
        return self.control_plane.contained_failures()

    # -- requests -----------------------------------------------------------

    @property
    def senders_to_schedulers(self) -> list:
        """One sender per rank, in rank order (plugins' handlers may send with them)."""
        return self.router.senders_to_schedulers

    @property
    def rank_of_rid(self) -> dict[str, int]:
        """The rank serving each completion in flight (read it; the router keeps it)."""
        return self.router.rank_of_rid

    def num_requests_per_rank(self) -> list[int]:
        return self.router.num_requests_per_rank()

    @property
    def batch_limit(self) -> int:
        """Most completions a batch may have: prompts × n."""
        return batch_limit(self.max_prompts_per_request, self.max_requests_in_flight)

    def check_capacity(self, num_choices: int) -> None:
        if self.is_draining:
            raise RequestError("the server is shutting down; send the request to another instance", status_code=503)
        if len(self.rid_to_state) + num_choices > self.max_requests_in_flight:
            raise RequestError(
                f"the server already holds {len(self.rid_to_state)} requests "
                "(scheduler.max_running_requests + scheduler.max_queued_requests); retry later",
                status_code=503,
            )

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        """Outputs of every completion of the request; see :class:`GenerateOutput`.

        The sampling parameters were validated where they were built (at the HTTP
        edge, :func:`tercet.http.sampling_fields.checked_sampling_params`) and are
        trusted here: only what depends on the model is checked, the prompts'
        tokens against its vocabulary and its context length. A batch's prompts
        all pass every check before any is sent (:mod:`tercet.frontend.prompt_batch`)."""
        received_at = unix_now()
        if not self.abilities.can_generate:
            raise RequestError(ENCODER_CANNOT_GENERATE, "model")
        check_batch_size(request, self.max_prompts_per_request, self.max_requests_in_flight)
        check_constraint_size(request.sampling_params, self.context.config.grammar.max_constraint_bytes)
        self.check_capacity(request.num_completions)  # refuse before the work of tokenizing
        input_ids = await self.prompts.run_off_loop(tokenize_prompts, request, self.prompts.tokenize)
        # Other requests came in while this one was tokenized. From here to the
        # send nothing awaits, so these checks still hold when it is registered.
        self.check_capacity(request.num_completions)
        n = request.sampling_params.n
        rid = self.worker.tag(request.rid or uuid.uuid4().hex)
        rids = prompt_rids(rid, request)
        choices = [choice_rid(prompt_rid, index, n) for prompt_rid in rids for index in range(n)]
        self.check_unused(choices, request.rid)
        messages = prompt_messages(request, rids, input_ids)
        event = asyncio.Event()
        states = {choice: ReqState(index, event, received_at=received_at) for index, choice in enumerate(choices)}
        sent: set[str] = set()  # the completions whose prompt reached a scheduler
        # Registered inside the try that unregisters: a request whose message
        # cannot be encoded, or that fails in any way, must not keep its place
        # of max_requests_in_flight for good.
        try:
            self.rid_to_state.update(states)
            for position, message in enumerate(messages):
                self.send_request(message, choices[position * n:(position + 1) * n], sent)
            async for output in outputs_as_they_come(states, event, request.stream):
                if output.prompt_logprobs is not None:
                    output = dataclasses.replace(output, prompt_token_ids=input_ids[output.index // n])
                yield output
        finally:
            self.release_states(states, sent)

    def check_unused(self, ids: list[str], rid: str | None) -> None:
        """Refuse a request whose completion (or input) ids are already held: its id ``rid`` is in use."""
        if any(held in self.rid_to_state for held in ids):
            raise RequestError(f"request id {rid!r} is already in use", "rid")

    def send_request(self, message, ids: list[str], sent: set[str]) -> None:
        """Send ``message``, the request for completions (or inputs) ``ids``, to a scheduler; ``sent`` notes them."""
        if self.traces is not None:  # stamped before: the scheduler may receive it before send returns
            self.stamp_sent(ids)
        rank = self.router.send(message, ids)
        sent.update(ids)
        for held in ids:
            self.metrics.started(held, rank)

    def stamp_sent(self, ids: list[str]) -> None:
        now = unix_now()
        for held in ids:
            state = self.rid_to_state.get(held)
            if state is not None:
                state.sent_at = now

    def release_states(self, states: dict[str, ReqState], sent: set[str]) -> list[str]:
        """Drop a request's states. Those sent and not finished are aborted, their
        caller having stopped early (client gone, say): the scheduler need not
        finish their work. Returns the ids aborted."""
        aborted = [held for held, state in states.items() if held in sent and not state.finished]
        for held in aborted:
            self.abort(held)
        for held in states:
            self.rid_to_state.pop(held, None)
            self.router.forget(held)
        return aborted

    def abort(self, rid: str) -> bool:
        """Abort one completion by id; False if no such request is in flight here."""
        return self.router.abort(rid)

    async def abort_request(self, rid: str) -> bool:
        """Abort the request the client knows as ``rid`` (all its completions), held by this
        API worker or another; whether one was found."""
        tagged = self.worker.tag(rid)
        choices = [tagged] + [choice for choice in self.rank_of_rid if choice.startswith(tagged + "#")]
        if any([self.abort(choice) for choice in choices]):
            return True
        others = self.worker.others()
        if not others:
            return False
        # Another worker's: its ranks are unknown here, so every rank looks.
        replies = await self.control(AbortRequestsReq, rids=[worker.tag(rid) for worker in others])
        return any(reply.data.get("num_aborted", 0) for reply in replies)

    # -- outputs, and their end -----------------------------------------------

    def fail_requests_in_flight(self, message: str) -> None:
        """End every request held here with a 503 abort carrying ``message``:
        with a child dead, or the server stopping, their outputs would never
        come. Runs on the event loop."""
        finish = FinishReason(FinishKind.ABORT, message=message, status_code=503)
        for rid, state in list(self.rid_to_state.items()):
            if not state.finished:
                state.out_list.append(GenerateOutput(self.worker.untag(rid), "", [], finish, 0, 0, index=state.index))
                state.finished = True
                state.event.set()

    def observe_for_metrics(self, rid: str, batch: BatchStrOutput, position: int) -> None:
        # Counted even when the caller has gone (its abort is a finish reason too). A
        # failure here must not cost the batch its outputs: it is counted and dropped.
        try:
            self.metrics.output(rid, len(batch.new_token_ids[position]), batch.prompt_tokens[position],
                                batch.finished_reasons[position])
        except Exception:
            self.failures.record("metrics", f"observing an output of request {rid!r} for /metrics failed")

    def handle_batch_str_output(self, batch: BatchStrOutput) -> None:
        for position, rid in enumerate(batch.rids):
            finish_reason = batch.finished_reasons[position]
            self.observe_for_metrics(rid, batch, position)
            state = self.rid_to_state.get(rid)
            if state is None:  # already consumed or aborted by its caller
                continue
            state.out_list.append(
                GenerateOutput(
                    rid=self.worker.untag(rid),
                    text=batch.text_deltas[position],
                    token_ids=list(batch.new_token_ids[position]),
                    finish_reason=finish_reason,
                    prompt_tokens=batch.prompt_tokens[position],
                    completion_tokens=batch.completion_tokens[position],
                    index=state.index,
                    output_logprobs=batch.output_logprobs[position],
                    prompt_logprobs=batch.prompt_logprobs[position],
                    cached_tokens=batch.cached_tokens[position],
                )
            )
            if finish_reason is not None:
                state.finished = True
                if self.traces is not None:
                    self.trace_finished(rid, state, batch, position)
            state.event.set()

    def trace_finished(self, rid: str, state: ReqState, batch: BatchStrOutput, position: int) -> None:
        # A failure here costs the request its trace, never its output.
        try:
            self.traces.trace_finished(self.worker.untag(rid), state, batch, position, self.rank_of_rid.get(rid))
        except Exception:
            self.failures.record("request_traces", f"tracing request {rid!r} failed")
