"""The detokenizer process: token ids in, text deltas out.

It owns only the text boundary; the strategy (a plugin) turns each request's
token ids into complete text, holding back incomplete UTF-8, and a
:class:`StopStringFilter` per request with stop strings trims the match and
holds back text that may still become one.
"""

from __future__ import annotations

import logging

import zmq

from tercet.channels import MessageReceiver, MessageSender
from tercet.child_process import run_child
from tercet.dispatcher import TypeBasedDispatcher
from tercet.messages import BatchStrOutput, BatchTokenIDOutput, DetokenizeParams, FinishReason
from tercet.plugin_manager import message_handlers
from tercet.process_context import ProcessContext
from tercet.stage_timer import stage_timer
from tercet.stop_strings import StopStringFilter

logger = logging.getLogger(__name__)
DEFAULT_DETOKENIZE_PARAMS = DetokenizeParams()


class DetokenizerManager:
    def __init__(self, context: ProcessContext, port_args, tokenizer):
        serializer = context.create_serializer()
        self.zmq_context = zmq.Context()
        self.receiver = MessageReceiver(self.zmq_context, port_args.detokenizer_input, serializer, bind=True)
        self.sender_to_tokenizer = MessageSender(self.zmq_context, port_args.tokenizer_input, serializer)
        self.detokenizer = context.registries.detokenizers.get(context.config.detokenizer.strategy)(tokenizer)
        self.started_rids: set[str] = set()
        self.stop_filters: dict[str, StopStringFilter] = {}
        self.timer = stage_timer("detokenizer", context.config.server.profile_interval, logger)
        self.dispatcher = TypeBasedDispatcher(
            [
                (BatchTokenIDOutput, self.handle_batch_token_id_output),
                *[
                    (message_type, lambda message, handler=handler: handler(self, message))
                    for message_type, handler in message_handlers(context.plugin_manager, "detokenizer")
                ],
            ]
        )

    def run_forever(self) -> None:
        while True:
            self.receiver.poll(timeout_ms=None)
            with self.timer.stage("receive"):
                messages = self.receiver.receive_pending()
            for message in messages:
                self.dispatcher(message)
            self.timer.end_step()

    def close(self) -> None:
        self.receiver.close()
        self.sender_to_tokenizer.close()
        self.zmq_context.term()

    def handle_batch_token_id_output(self, batch: BatchTokenIDOutput) -> None:
        with self.timer.stage("detokenize"):
            text_deltas = [
                self.text_delta(rid, token_ids, finish_reason, params)
                for rid, token_ids, finish_reason, params in zip(
                    batch.rids, batch.new_token_ids, batch.finished_reasons, batch.detokenize_params
                )
            ]
        with self.timer.stage("send"):
            self.send_text(batch, text_deltas)

    def send_text(self, batch: BatchTokenIDOutput, text_deltas: list[str]) -> None:
        self.sender_to_tokenizer.send(
            BatchStrOutput(
                rids=batch.rids,
                text_deltas=text_deltas,
                new_token_ids=batch.new_token_ids,
                finished_reasons=batch.finished_reasons,
                prompt_tokens=batch.prompt_tokens,
                completion_tokens=batch.completion_tokens,
                output_logprobs=batch.output_logprobs,
                prompt_logprobs=batch.prompt_logprobs,
                cached_tokens=batch.cached_tokens,
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
    def build(context: ProcessContext):
        from tercet.tokenizer import load_tokenizer

        return DetokenizerManager(context, port_args, load_tokenizer(config.model.path)), {}

    run_child("detokenizer", config, ready_writer, build)
