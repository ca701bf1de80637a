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
from tercet.messages import AbortReq, FinishReason, TokenizedGenerateReq, choice_rid
from tercet.plugin_manager import message_handlers
from tercet.process_context import ProcessContext
from tercet.scheduler.kv_memory import RequestKVMemory
from tercet.scheduler.output import take_unsent_output
from tercet.scheduler.req import Req
from tercet.scheduler.stop_conditions import StopConditions

logger = logging.getLogger(__name__)


def completion_seed(seed: int, index: int) -> int:
    """Distinct, reproducible seeds for the n completions of one request."""
    return seed if index == 0 else (seed * 1_000_003 + index) % (1 << 63)


class Scheduler:
    def __init__(self, context: ProcessContext, port_args, model_runner, tokenizer):
        config = context.config
        self.config = config
        self.model_runner = model_runner
        self.kv_memory = RequestKVMemory(model_runner)
        self.stop_conditions = StopConditions(model_runner.eos_token_ids, tokenizer)
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
        # Waiting requests are group leaders; their followers wait inside them.
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
        admitted = self.admit_waiting_requests()
        if self.running:
            self.run_batch(admitted)
        self.send_outputs()

    # -- message handlers -------------------------------------------------

    def handle_generate_request(self, message: TokenizedGenerateReq) -> None:
        params = message.sampling_params
        arrival_index = next(self.arrival_counter)
        group = [
            Req(choice_rid(message.rid, index, params.n), list(message.input_ids), params, arrival_index,
                seed=completion_seed(params.seed, index))
            for index in range(params.n)
        ]
        leader, leader.followers = group[0], group[1:]
        if not self.kv_memory.can_ever_fit(group):
            needed = sum(req.max_num_tokens for req in group)
            reason = FinishReason(
                "abort",
                message=f"the request needs {needed} KV cache tokens (prompt + max_tokens, for each of n) "
                f"but the whole cache holds {self.kv_memory.capacity_tokens} (cache.max_total_tokens)",
                status_code=400,
            )
            for req in group:
                self.finish(req, reason)
            return
        self.waiting.append(leader)

    def handle_abort_request(self, message: AbortReq) -> None:
        for req in self.running:
            if req.rid == message.rid:
                self.running.remove(req)
                self.finish(req, FinishReason("abort", message="aborted"))
                return
        for leader in self.waiting:
            for req in leader.group:
                if req.rid == message.rid:
                    self.remove_from_waiting(leader, req)
                    self.finish(req, FinishReason("abort", message="aborted"))
                    return

    def remove_from_waiting(self, leader: Req, req: Req) -> None:
        if req is not leader:
            leader.followers.remove(req)
            return
        position = self.waiting.index(leader)
        if leader.followers:
            # The next completion leads the rest of the group.
            successor, successor.followers = leader.followers[0], leader.followers[1:]
            self.waiting[position] = successor
        else:
            del self.waiting[position]
        leader.followers = []

    # -- admission and the model step ---------------------------------------

    def admit_waiting_requests(self) -> list[Req]:
        """Move waiting groups into the running batch while memory and the caps allow."""
        budget = self.prefill_token_budget
        admitted: list[Req] = []
        for leader in self.policy.order(self.waiting):
            group = leader.group
            if len(self.running) + len(admitted) + len(group) > self.max_running_requests:
                break
            prompt_length = len(leader.input_ids)
            if admitted and prompt_length > budget:
                break
            if not self.kv_memory.try_allocate_group(group):
                break
            admitted.extend(group)
            budget -= prompt_length
        for req in admitted:
            if req in self.waiting:
                self.waiting.remove(req)
        self.running.extend(admitted)
        return admitted

    def run_batch(self, admitted: list[Req]) -> None:
        from tercet.model.logprobs import prompt_logprobs
        from tercet.model.sampler import SamplingBatch, sample

        followers = {id(f): leader for leader in admitted for f in leader.followers}
        fed = [req for req in self.running if id(req) not in followers]
        forward_batch = self.model_runner.build_batch(
            req_pool_indices=[req.req_pool_index for req in fed],
            prefix_lens=[req.num_cached_tokens for req in fed],
            new_token_ids=[req.tokens_to_feed() for req in fed],
        )
        wants_prompt_logprobs = [
            index for index, req in enumerate(fed)
            if req.sampling_params.return_prompt_logprob and req.num_cached_tokens == 0
        ]
        if wants_prompt_logprobs:
            logits, prompt_logits = self.model_runner.forward_with_prompt_logits(forward_batch, wants_prompt_logprobs)
            for index, full_logits in prompt_logits.items():
                req = fed[index]
                req.prompt_logprobs = prompt_logprobs(full_logits, req.input_ids, req.sampling_params.top_logprobs_num)
        else:
            logits = self.model_runner.forward(forward_batch)

        # Followers sample their first token from their leader's logits row.
        row_of = {id(req): row for row, req in enumerate(fed)}
        sampled = fed + [req for req in self.running if id(req) in followers]
        if len(sampled) > len(fed):
            logits = logits[[row_of[id(followers.get(id(req), req))] for req in sampled]]
            self.kv_memory.copy_prompt_kv([(followers[id(req)], req) for req in sampled[len(fed):]])
        for req in sampled:
            req.num_cached_tokens = req.num_tokens

        sampling_batch = SamplingBatch.from_params(
            [req.sampling_params for req in sampled],
            seeds=[req.seed for req in sampled],
            steps=[len(req.output_ids) for req in sampled],
            prompt_ids=[req.input_ids for req in sampled],
            output_ids=[req.output_ids for req in sampled],
            stop_token_ids_for_min_tokens=[self.stop_conditions.expected_stop_token_ids(req) for req in sampled],
            device=logits.device,
        )
        result = sample(logits, sampling_batch)
        for row, (req, token_id) in enumerate(zip(sampled, result.token_ids)):
            if req.needs_prefill_only:
                self.finish(req, FinishReason("length"))
                continue
            req.output_ids.append(token_id)
            if req.sampling_params.return_logprob:
                req.unsent_logprobs.append(result.logprobs[row])
                req.unsent_top_logprobs.append(result.top_logprobs[row])
            reason = self.stop_conditions.check(req)
            if reason is not None:
                self.finish(req, reason)
        self.running = [req for req in self.running if not req.is_finished]
        for leader in admitted:
            leader.followers = []

    def finish(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self.kv_memory.release(req)
        self.finished_unsent.append(req)

    # -- output -----------------------------------------------------------

    def send_outputs(self) -> None:
        ready = [req for req in self.running if len(req.output_ids) > req.num_sent_tokens] + self.finished_unsent
        self.finished_unsent = []
        if ready:
            self.sender_to_detokenizer.send(take_unsent_output(ready))

    def close(self) -> None:
        self.receiver.close()
        self.sender_to_detokenizer.close()
        self.zmq_context.term()
