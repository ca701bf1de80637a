"""The detokenizer process: token ids in, text deltas out.

It owns only the text boundary; the strategy (a plugin) turns each request's
token ids into complete text, holding back incomplete UTF-8, and a
:class:`StopStringFilter` per request with stop strings trims the match and
holds back text that may still become one.

The strategy is a plugin: when it raises on one request, that request alone
ends with an internal error (its client is told, the schedulers are asked to
abort it, its later outputs are dropped), and the other rows of the batch go
out as usual.
"""

from __future__ import annotations

import logging

from tercet.containment import ContainedFailures
from tercet.detokenizer.stop_strings import StopStringFilter
from tercet.ipc.result_routes import ResultRoutes
from tercet.ipc.messages import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchStrOutput,
    BatchTokenIDOutput,
    ContainedFailureReport,
    DetokenizeParams,
    FinishReason,
)
from tercet.metrics.stage_timer import stage_timer
from tercet.processes.child import run_child
from tercet.processes.context import ProcessContext
from tercet.processes.manager_io import ManagerIO
from tercet.processes.title import set_process_title

logger = logging.getLogger(__name__)
DEFAULT_DETOKENIZE_PARAMS = DetokenizeParams()
EDGE_FROM_SCHEDULER = "edge 2 (scheduler -> detokenizer)"


class _ReportingFailures(ContainedFailures):
    """Counts here, and tells every API worker's TokenizerManager, which shows the counts."""

    def __init__(self, routes: ResultRoutes):
        super().__init__("detokenizer", logger)
        self.routes = routes

    def count(self, kind: str, plugin: str | None = None) -> int:
        try:
            self.routes.send_to_all(ContainedFailureReport("detokenizer", kind, plugin))
        except Exception:  # the count here is what matters; the report is a courtesy
            logger.exception("could not report a contained failure")
        return super().count(kind, plugin)


class DetokenizerManager:
    def __init__(self, context: ProcessContext, port_args, tokenizer):
        self.io = ManagerIO(context, "detokenizer", EDGE_FROM_SCHEDULER)
        # Each output goes to the API worker that sent its request (tercet.ipc.result_routes).
        self.sender_to_tokenizer = ResultRoutes(self.io.open_sender, port_args.tokenizer_inputs)
        self.failures = _ReportingFailures(self.sender_to_tokenizer)
        self.receiver = self.io.open_receiver(port_args.detokenizer_input, self.failures)
        # A request the strategy failed on is aborted wherever it runs (abort is idempotent).
        self.senders_to_schedulers = [self.io.open_sender(endpoint) for endpoint in port_args.scheduler_inputs]
        self.detokenizer = context.chosen("detokenizers")(tokenizer)
        self.strategy_plugin = context.chosen_plugin_name("detokenizers")
        self.started_rids: set[str] = set()
        # Requests the strategy failed on whose last output has not come yet: their outputs are dropped.
        self.failed_rids: set[str] = set()
        self.stop_filters: dict[str, StopStringFilter] = {}
        self.timer = stage_timer("detokenizer", context.config.server.profile_interval, logger)
        self.io.set_handlers([
            (BatchTokenIDOutput, self.handle_batch_token_id_output),
            # Embeddings have no text: they go on to the TokenizerManager as they came.
            (BatchEmbeddingOutput, self.sender_to_tokenizer.send_batch),
            *self.io.plugin_handlers(lambda: self),
        ])

    def run_forever(self) -> None:
        while True:
            self.receiver.poll(timeout_ms=None)
            with self.timer.stage("receive"):
                messages = self.receiver.receive_pending()
            for message in messages:
                self.dispatch(message)
            self.timer.end_step()

    def dispatch(self, message) -> None:
        """Handle one message as the loop does (see the loop-error policy in tercet.processes.manager_io)."""
        self.io.dispatch(message)

    def close(self) -> None:
        self.io.close()

    def handle_batch_token_id_output(self, batch: BatchTokenIDOutput) -> None:
        kept: list[int] = []
        text_deltas: list[str] = []
        finished_reasons = list(batch.finished_reasons)
        with self.timer.stage("detokenize"):
            for row, (rid, token_ids, finish_reason, params) in enumerate(
                zip(batch.rids, batch.new_token_ids, batch.finished_reasons, batch.detokenize_params)
            ):
                if rid in self.failed_rids:
                    if finish_reason is not None:  # its last output: nothing more will come
                        self.failed_rids.discard(rid)
                    continue
                try:
                    text_deltas.append(self.text_delta(rid, token_ids, finish_reason, params))
                except Exception:
                    finished_reasons[row] = self.fail_request(rid, is_finished=finish_reason is not None)
                    text_deltas.append("")
                kept.append(row)
        with self.timer.stage("send"):
            self.send_text(batch, kept, text_deltas, finished_reasons)

    def fail_request(self, rid: str, is_finished: bool) -> FinishReason:
        """The strategy raised on ``rid``: forget it, abort it, and give the finish reason its client gets."""
        self.failures.record("detokenizer", f"detokenizing request {rid!r} failed", plugin=self.strategy_plugin)
        self.started_rids.discard(rid)
        self.stop_filters.pop(rid, None)
        try:
            self.detokenizer.finish(rid)  # lets the strategy drop its state, if it still can
        except Exception:
            pass
        if not is_finished:
            self.failed_rids.add(rid)
            for sender in self.senders_to_schedulers:
                sender.send(AbortReq(rid))
        return FinishReason.internal_failure("turning its tokens into text")

    def send_text(self, batch: BatchTokenIDOutput, rows: list[int], text_deltas: list[str],
                  finished_reasons: list[FinishReason | None]) -> None:
        if not rows:
            return

        def column(values: list) -> list:
            return values if len(rows) == len(values) else [values[row] for row in rows]

        self.sender_to_tokenizer.send_batch(
            BatchStrOutput(
                rids=column(batch.rids),
                text_deltas=text_deltas,
                new_token_ids=column(batch.new_token_ids),
                finished_reasons=column(finished_reasons),
                prompt_tokens=column(batch.prompt_tokens),
                completion_tokens=column(batch.completion_tokens),
                output_logprobs=column(batch.output_logprobs),
                prompt_logprobs=column(batch.prompt_logprobs),
                cached_tokens=column(batch.cached_tokens),
                phase_times=column(batch.phase_times) if batch.phase_times else [None] * len(rows),
            )
        )

    def text_delta(
        self, rid: str, token_ids: list[int], finish_reason: FinishReason | None, params: DetokenizeParams | None
    ) -> str:
        """The text of one request's new tokens that the client may see now."""
        if rid not in self.started_rids:
            self.start_request(rid, params or DEFAULT_DETOKENIZE_PARAMS)
        delta = self.detokenizer.append(rid, token_ids) if token_ids else ""
        if finish_reason is not None:
            delta += self.detokenizer.finish(rid)
            self.started_rids.discard(rid)
        stop_filter = self.stop_filters.get(rid)
        if stop_filter is None:
            return delta
        delta = stop_filter.feed(delta)
        if finish_reason is not None:
            delta += stop_filter.flush()
            del self.stop_filters[rid]
        return delta

    def start_request(self, rid: str, params: DetokenizeParams) -> None:
        self.detokenizer.start(rid, params.skip_special_tokens)
        self.started_rids.add(rid)
        if params.stop:
            self.stop_filters[rid] = StopStringFilter(params.stop, params.no_stop_trim)


def run_detokenizer_process(config, port_args, ready_writer) -> None:
    set_process_title("tercet detokenizer")
    def build(context: ProcessContext):
        from tercet.tokenizer.loading import load_tokenizer

        return DetokenizerManager(context, port_args, load_tokenizer(config.model.path)), {}

    run_child("detokenizer", config, ready_writer, build)
