"""The TokenizerManager's bookkeeping, driven through its real message handler."""

from __future__ import annotations

import asyncio

import pytest

from tercet.config import load_config
from tercet.io_struct import GenerateRequest
from tercet.messages import BatchStrOutput, FinishReason
from tercet.port_args import PortArgs
from tercet.process_context import ProcessContext
from tercet.sampling_params import SamplingParams
from tercet.tokenizer import load_tokenizer
from tercet.tokenizer_manager import TokenizerManager


@pytest.fixture
def manager(tiny_llama_dir):
    config = load_config(environ={}, overrides={"model": {"path": str(tiny_llama_dir)}})
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    # No scheduler listens: what the manager sends waits in ZeroMQ's queue.
    manager = TokenizerManager(context, port_args, load_tokenizer(str(tiny_llama_dir)), "tiny", 1024)
    yield manager
    manager.close()
    port_args.remove_runtime_dir()


def step_output(rid: str, text: str, token_id: int, finish: FinishReason | None, completion_tokens: int):
    return BatchStrOutput(
        rids=[rid], text_deltas=[text], new_token_ids=[[token_id]], finished_reasons=[finish],
        prompt_tokens=[2], completion_tokens=[completion_tokens], output_logprobs=[None],
        prompt_logprobs=[None], cached_tokens=[0],
    )


def test_the_last_output_arriving_while_the_stream_is_consumed_is_not_lost(manager):
    async def scenario():
        request = GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello", stream=True, rid="r1")
        outputs = manager.generate(request)
        first_step = asyncio.ensure_future(anext(outputs))
        await asyncio.sleep(0)  # the request is registered and waiting
        manager.handle_batch_str_output(step_output("r1", "Hel", 5, None, 1))
        first = await first_step
        # The caller is busy with the first piece (sending it to a slow client,
        # say) when the scheduler's last output comes in.
        manager.handle_batch_str_output(step_output("r1", "lo", 6, FinishReason("length"), 2))
        rest = [piece async for piece in outputs]
        return first, rest

    first, rest = asyncio.run(scenario())
    assert first.text == "Hel" and first.finish_reason is None
    assert [(piece.text, piece.finish_reason.kind, piece.completion_tokens) for piece in rest] == [("lo", "length", 2)]
    assert manager.num_requests_in_flight == 0


def test_a_draining_manager_refuses_new_requests_with_503(manager):
    manager.is_draining = True

    async def try_one():
        request = GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello")
        return [piece async for piece in manager.generate(request)]

    with pytest.raises(Exception) as refused:
        asyncio.run(try_one())
    assert refused.value.status_code == 503 and "shutting down" in refused.value.message
