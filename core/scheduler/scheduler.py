"""The scheduler: admits requests, runs one model step for the whole batch, emits tokens.

Each step feeds, in ONE forward pass, the whole prompt of every newly admitted
request together with the last sampled token of every running request
(continuous batching): new requests join the running batch between steps.
"""

from __future__ import annotations

import itertools
import logging

import zmq

from tercet.channels import MessageReceiver, MessageSender
from tercet.dispatcher import TypeBasedDispatcher
from tercet.messages import AbortReq, BatchTokenIDOutput, FinishReason, TokenizedGenerateReq
from tercet.plugin_manager import message_handlers
from tercet.process_context import ProcessContext
from tercet.scheduler.kv_memory import RequestKVMemory
from tercet.scheduler.req import Req

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, context: ProcessContext, port_args, model_runner):
        config = context.config
        self.config = config
        self.model_runner = model_runner
        self.kv_memory = RequestKVMemory(model_runner)
        self.policy = context.registries.scheduling_policies.get(config.scheduler.policy)(config.scheduler)
        self.max_running_requests = config.scheduler.max_running_requests
        self.prefill_token_budget = config.scheduler.chunked_prefill_size

        serializer = context.create_serializer()
        self.zmq_context = zmq.Context()
        self.receiver = MessageReceiver(self.zmq_context, port_args.scheduler_input, serializer, bind=True)
        self.sender_to_detokenizer = MessageSender(self.zmq_context, port_args.detokenizer_input, serializer)
        self.dispatcher = TypeBasedDispatcher(
            [
                (TokenizedGenerateReq, self.handle_generate_request),
                (AbortReq, self.handle_abort_request),
                *[
                    (message_type, lambda message, handler=handler: handler(self, message))
                    for message_type, handler in message_handlers(context.plugin_manager, "scheduler")
                ],
            ]
        )
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.arrival_counter = itertools.count()
        # Finished or refused requests whose last output has not been sent yet.
        self.finished_unsent: list[Req] = []

    # -- the loop ---------------------------------------------------------

    def run_forever(self) -> None:
        while True:
            self.receive_and_dispatch(block=not (self.waiting or self.running))
            self.run_step()

    def receive_and_dispatch(self, block: bool) -> None:
        if block:
            self.receiver.poll(timeout_ms=None)
        for message in self.receiver.receive_pending():
            self.dispatcher(message)

    def run_step(self) -> None:
        self.admit_waiting_requests()
        if self.running:
            self.run_batch(self.running)
        self.send_outputs()

    # -- message handlers -------------------------------------------------

    def handle_generate_request(self, message: TokenizedGenerateReq) -> None:
        req = Req(message.rid, list(message.input_ids), message.sampling_params, next(self.arrival_counter))
        if not self.kv_memory.can_ever_fit(req):
            capacity = self.kv_memory.page_allocator.num_total * self.kv_memory.page_size
            self.finish(req, FinishReason(
                "abort",
                message=f"the request needs {req.max_num_tokens} KV cache tokens (prompt + max_tokens) "
                f"but the whole cache holds {capacity} (cache.max_total_tokens)",
                status_code=400,
            ))
            return
        self.waiting.append(req)

    def handle_abort_request(self, message: AbortReq) -> None:
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.rid == message.rid:
                    queue.remove(req)
                    self.finish(req, FinishReason("abort", message="aborted"))
                    return

    # -- admission and the model step ---------------------------------------

    def admit_waiting_requests(self) -> None:
        if not self.waiting:
            return
        budget = self.prefill_token_budget
        admitted: list[Req] = []
        for req in self.policy.order(self.waiting):
            if len(self.running) + len(admitted) >= self.max_running_requests:
                break
            prompt_length = len(req.input_ids)
            if admitted and prompt_length > budget:
                break
            if req.sampling_params.max_new_tokens == 0:
                admitted.append(req)
                continue
            if not self.kv_memory.try_allocate(req):
                break
            admitted.append(req)
            budget -= prompt_length
        for req in admitted:
            self.waiting.remove(req)
            if req.sampling_params.max_new_tokens == 0:
                self.finish(req, FinishReason("length"))
            else:
                self.running.append(req)

    def run_batch(self, batch: list[Req]) -> None:
        from tercet.model.sampler import SamplingBatch, sample

        forward_batch = self.model_runner.build_batch(
            req_pool_indices=[req.req_pool_index for req in batch],
            prefix_lens=[req.num_cached_tokens for req in batch],
            new_token_ids=[req.tokens_to_feed() for req in batch],
        )
        logits = self.model_runner.forward(forward_batch)
        sampling_batch = SamplingBatch.from_params(
            [req.sampling_params for req in batch],
            seeds=[req.sampling_params.seed for req in batch],
            steps=[len(req.output_ids) for req in batch],
            device=logits.device,
        )
        next_token_ids = sample(logits, sampling_batch).tolist()
        for req, token_id in zip(batch, next_token_ids):
            req.num_cached_tokens = req.num_tokens
            req.output_ids.append(token_id)
            reason = self.check_finished(req, token_id)
            if reason is not None:
                self.finish(req, reason)
        self.running = [req for req in self.running if not req.is_finished]

    def check_finished(self, req: Req, token_id: int) -> FinishReason | None:
        params = req.sampling_params
        if token_id in params.stop_token_ids or (not params.ignore_eos and token_id in self.model_runner.eos_token_ids):
            return FinishReason("stop", matched_token=token_id)
        if len(req.output_ids) >= params.max_new_tokens:
            return FinishReason("length")
        return None

    def finish(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self.kv_memory.release(req)
        self.finished_unsent.append(req)

    # -- output -----------------------------------------------------------

    def send_outputs(self) -> None:
        ready = [req for req in self.running if len(req.output_ids) > req.num_sent_tokens] + self.finished_unsent
        self.finished_unsent = []
        if not ready:
            return
        new_token_ids = []
        for req in ready:
            new_token_ids.append(req.output_ids[req.num_sent_tokens:])
            req.num_sent_tokens = len(req.output_ids)
        self.sender_to_detokenizer.send(
            BatchTokenIDOutput(
                rids=[req.rid for req in ready],
                new_token_ids=new_token_ids,
                finished_reasons=[req.finish_reason for req in ready],
                prompt_tokens=[len(req.input_ids) for req in ready],
                completion_tokens=[len(req.output_ids) for req in ready],
                skip_special_tokens=[req.sampling_params.skip_special_tokens for req in ready],
            )
        )

    def close(self) -> None:
        self.receiver.close()
        self.sender_to_detokenizer.close()
        self.zmq_context.term()
