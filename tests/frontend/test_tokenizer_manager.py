"""The TokenizerManager's bookkeeping, driven through its real message handler."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tercet.config import load_config
from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateRequest
from tercet.frontend.tokenizer_manager import TokenizerManager
from tercet.ipc.messages import BatchStrOutput, FinishReason
from tercet.ipc.port_args import PortArgs
from tercet.processes.context import ProcessContext
from tercet.sampling_params import SamplingParams
from tercet.tokenizer.loading import load_tokenizer


@pytest.fixture
def manager(tokenizer_manager_alone):
    # No scheduler listens: what the manager sends waits in ZeroMQ's queue.
    return tokenizer_manager_alone


def test_close_closes_its_sockets_and_terminates_both_zmq_contexts(tiny_llama_dir):
    config = load_config(environ={}, overrides={"model": {"path": str(tiny_llama_dir)}})
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    manager = TokenizerManager(context, port_args, load_tokenizer(str(tiny_llama_dir)), "tiny", 1024)
    try:
        manager.close()
        # Left unterminated, each context keeps its I/O thread alive in the server process.
        assert manager.io.zmq_context.closed and manager.io.async_zmq_context.closed
        assert manager.receiver.socket.closed
        assert all(sender.socket.closed for sender in manager.router.senders_to_schedulers)
        manager.close()  # the launcher may close again on its way out: nothing happens
    finally:
        port_args.remove_runtime_dir()


def step_output(rid: str, text: str, token_id: int, finish: FinishReason | None, completion_tokens: int):
    return BatchStrOutput(
        rids=[rid], text_deltas=[text], new_token_ids=[[token_id]], finished_reasons=[finish],
        prompt_tokens=[2], completion_tokens=[completion_tokens], output_logprobs=[None],
        prompt_logprobs=[None], cached_tokens=[0],
    )


async def wait_until(condition, timeout: float = 30.0) -> None:
    """Let the event loop run until ``condition()`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.001)


def test_the_last_output_arriving_while_the_stream_is_consumed_is_not_lost(manager):
    async def scenario():
        request = GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello", stream=True, rid="r1")
        outputs = manager.generate(request)
        first_step = asyncio.ensure_future(anext(outputs))
        await wait_until(lambda: "r1" in manager.rid_to_state)  # tokenized, registered and waiting
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


def consume(manager, request: GenerateRequest) -> list:
    async def run():
        return [piece async for piece in manager.generate(request)]

    return asyncio.run(run())


@pytest.mark.parametrize("how", ["send raises", "message cannot be encoded"])
def test_a_request_that_cannot_be_sent_holds_nothing(manager, monkeypatch, how):
    aborted = []
    monkeypatch.setattr(manager, "abort", aborted.append)
    if how == "send raises":
        def refuse(message):
            raise ValueError("no such luck")

        monkeypatch.setattr(manager.senders_to_schedulers[0], "send", refuse)
        request = GenerateRequest(SamplingParams(max_new_tokens=2, n=3), text="Hello")
    else:
        # msgpack refuses a lone surrogate (a tenant is not checked by SamplingParams).
        request = GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello", tenant="\ud800")
    for _ in range(3):
        with pytest.raises(Exception):
            consume(manager, request)
        assert manager.rid_to_state == {} and manager.rank_of_rid == {}
    assert aborted == []  # nothing reached the scheduler, so there is nothing to abort there


def test_a_too_long_prompt_is_refused_by_its_bytes_before_it_is_tokenized(manager, monkeypatch):
    monkeypatch.setattr(manager.tokenizer, "encode", lambda *a, **k: pytest.fail("the prompt was tokenized"))
    max_new_tokens = 16
    # One byte more than the longest prompt that might still fit.
    text = "x" * ((manager.context_len - max_new_tokens) * manager.max_bytes_per_token + 1)
    with pytest.raises(RequestError) as refused:
        consume(manager, GenerateRequest(SamplingParams(max_new_tokens=max_new_tokens), text=text))
    assert refused.value.status_code == 400 and refused.value.param == "prompt"
    assert "at least" in refused.value.message and "context length of 1024" in refused.value.message
    chat = [{"role": "user", "content": text}]
    with pytest.raises(RequestError) as refused_chat:
        asyncio.run(manager.tokenize_chat(chat, max_new_tokens))
    assert refused_chat.value.param == "messages" and "at least" in refused_chat.value.message
    assert manager.rid_to_state == {}


def test_a_max_tokens_no_prompt_could_fit_beside_names_max_tokens(manager):
    for max_new_tokens in (manager.context_len, 10 * manager.context_len):
        with pytest.raises(RequestError) as refused:
            consume(manager, GenerateRequest(SamplingParams(max_new_tokens=max_new_tokens), text="Hi"))
        assert refused.value.param == "max_tokens" and "plus max_tokens" in refused.value.message
        with pytest.raises(RequestError) as refused_chat:
            asyncio.run(manager.tokenize_chat([{"role": "user", "content": "Hi"}], max_new_tokens))
        assert refused_chat.value.param == "max_tokens"


def test_a_prompt_the_byte_bound_lets_through_is_measured_in_tokens(manager):
    # 3 bytes, 1 token each: far below the byte bound, and still too long.
    text = "abc " * 1500
    with pytest.raises(RequestError) as refused:
        consume(manager, GenerateRequest(SamplingParams(max_new_tokens=16), text=text))
    assert refused.value.param == "max_tokens" and "tokens) plus max_tokens" in refused.value.message


def test_a_prompt_that_is_not_unicode_is_a_400(manager):
    with pytest.raises(RequestError) as refused:
        consume(manager, GenerateRequest(SamplingParams(max_new_tokens=2), text="Hi \ud800"))
    assert refused.value.status_code == 400 and "position 3" in refused.value.message
    assert manager.rid_to_state == {}


def test_tokenizing_runs_off_the_event_loop(manager, monkeypatch):
    """While a prompt is tokenized the loop keeps running: here it is the loop
    that lets the tokenizer finish, which on the loop itself would never come."""
    started, may_finish = threading.Event(), threading.Event()
    encode = manager.tokenizer.encode

    def slow_encode(*args, **kwargs):
        started.set()
        assert may_finish.wait(30), "the event loop was blocked while tokenizing"
        return encode(*args, **kwargs)

    monkeypatch.setattr(manager.tokenizer, "encode", slow_encode)

    async def scenario():
        request = GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello", rid="slow")
        outputs = manager.generate(request)
        first = asyncio.ensure_future(anext(outputs))
        await wait_until(started.is_set)
        assert "slow" not in manager.rid_to_state  # nothing is held while tokenizing
        may_finish.set()
        await wait_until(lambda: "slow" in manager.rid_to_state)
        chat = asyncio.ensure_future(manager.tokenize_chat([{"role": "user", "content": "Hi"}]))
        manager.handle_batch_str_output(step_output("slow", "Hi", 5, FinishReason("length"), 1))
        output = await first
        await outputs.aclose()
        return output, await chat

    output, chat_ids = asyncio.run(scenario())
    assert output.text == "Hi" and chat_ids
    assert manager.num_requests_in_flight == 0


def test_the_chat_prompt_is_the_template_tokenized(manager):
    # (Special-token text in a message is another matter: tests/tokenizer/test_content_tokens.py.)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi < there"}]
    expected = manager.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = list(getattr(expected, "input_ids", expected))
    assert manager.prompts.apply_chat_template(messages) == expected
    assert asyncio.run(manager.tokenize_chat(messages)) == expected


def test_a_full_server_refuses_after_tokenizing_too(manager, monkeypatch):
    """Requests tokenized at the same time cannot together overfill the server."""
    monkeypatch.setattr(manager, "max_requests_in_flight", 1)

    async def scenario():
        outputs = [manager.generate(GenerateRequest(SamplingParams(max_new_tokens=2), text="Hello", rid=rid))
                   for rid in ("a", "b")]
        # Both pass the first check before either is tokenized.
        steps = [asyncio.ensure_future(anext(output)) for output in outputs]
        done, pending = await asyncio.wait(steps, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        held = set(manager.rid_to_state)
        for step in pending:
            step.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for output in outputs:
            await output.aclose()
        return [step.exception() for step in done], held

    refusals, held = asyncio.run(scenario())
    assert len(refusals) == 1 and refusals[0].status_code == 503
    assert len(held) == 1


# -- batches: several prompts in one request ------------------------------------------


def record_sends(manager, monkeypatch) -> list:
    sent = []
    monkeypatch.setattr(manager.senders_to_schedulers[0], "send", sent.append)
    return sent


def batch(prompts, n: int = 1, max_new_tokens: int = 2, **fields) -> GenerateRequest:
    return GenerateRequest(SamplingParams(max_new_tokens=max_new_tokens, n=n), prompts=prompts, **fields)


def test_a_batch_sends_one_request_per_prompt_and_numbers_its_completions(manager, monkeypatch):
    sent = record_sends(manager, monkeypatch)
    aborted = []
    monkeypatch.setattr(manager, "abort", aborted.append)

    async def scenario():
        outputs = manager.generate(batch(["Hello", "Hi there"], n=2, rid="b", stream=True))
        first = asyncio.ensure_future(anext(outputs))
        await wait_until(lambda: len(manager.rid_to_state) == 4)
        manager.handle_batch_str_output(step_output("b#1#0", "x", 5, None, 1))
        piece = await first
        await outputs.aclose()  # the client left: every unfinished completion is aborted
        return piece

    piece = asyncio.run(scenario())
    assert [message.rid for message in sent] == ["b#0", "b#1"]
    tokenizer = manager.tokenizer
    assert [message.input_ids for message in sent] == [tokenizer.encode("Hello"), tokenizer.encode("Hi there")]
    assert all(message.sampling_params.n == 2 for message in sent)
    # A seed left to the server is drawn for each prompt.
    assert sent[0].sampling_params.seed != sent[1].sampling_params.seed
    assert (piece.rid, piece.index) == ("b#1#0", 2)  # prompt 1, completion 0: 1 × n + 0
    assert sorted(aborted) == ["b#0#0", "b#0#1", "b#1#0", "b#1#1"]
    assert manager.rid_to_state == {} and manager.rank_of_rid == {}


@pytest.mark.parametrize(
    "prompts, field, param, fragment",
    [
        (["Hello", "abc " * 1500], "prompt", "prompt[1]", "exceeds the model's context length"),
        ([[1, 2], [1] * 2000], "input_ids", "input_ids[1]", "exceeds the model's context length"),
        (["Hello", "Hi", ""], "text", "text[2]", "the prompt is empty"),
        (["Hello", "Hi \ud800"], "prompt", "prompt[1]", "not valid Unicode"),
    ],
)
def test_one_bad_prompt_refuses_the_batch_before_anything_is_sent(
    manager, monkeypatch, prompts, field, param, fragment
):
    sent = record_sends(manager, monkeypatch)
    with pytest.raises(RequestError) as refused:
        consume(manager, batch(prompts, max_new_tokens=16, prompt_field=field))
    assert refused.value.status_code == 400 and refused.value.param == param
    assert refused.value.message.startswith(f"{param}: ") and fragment in refused.value.message
    assert sent == [] and manager.rid_to_state == {}


def test_an_empty_prompt_is_refused_alike_alone_and_in_a_batch(manager):
    with pytest.raises(RequestError) as alone:
        consume(manager, GenerateRequest(SamplingParams(max_new_tokens=2), text=""))
    with pytest.raises(RequestError) as batched:
        consume(manager, batch(["Hi", ""]))
    assert (alone.value.param, batched.value.param) == ("prompt", "prompt[1]")
    assert batched.value.message == f"prompt[1]: {alone.value.message}"


@pytest.mark.parametrize(
    "num_prompts, n, fragment",
    [(5, 1, "5 prompts, over this server's limit of 4"), (3, 2, "3 prompts × n=2 = 6 completions")],
)
def test_a_batch_over_the_limit_is_a_400_naming_the_prompt_field(manager, monkeypatch, num_prompts, n, fragment):
    sent = record_sends(manager, monkeypatch)
    monkeypatch.setattr(manager, "max_prompts_per_request", 4)
    with pytest.raises(RequestError) as refused:
        consume(manager, batch(["Hi"] * num_prompts, n=n, prompt_field="text"))
    assert refused.value.status_code == 400 and refused.value.param == "text"
    assert fragment in refused.value.message and "server.max_prompts_per_request" in refused.value.message
    assert sent == []


def test_a_batch_the_server_could_never_hold_is_a_400_not_a_503(manager, monkeypatch):
    monkeypatch.setattr(manager, "max_requests_in_flight", 3)
    with pytest.raises(RequestError) as refused:
        consume(manager, batch(["Hi"] * 4))
    assert refused.value.status_code == 400 and "scheduler.max_queued_requests" in refused.value.message
    assert manager.batch_limit == 3


def test_a_failing_metrics_observation_loses_no_output(manager, monkeypatch):
    def broken(*args):
        raise ValueError("broken metrics")

    monkeypatch.setattr(manager.metrics, "output", broken)

    async def scenario():
        request = GenerateRequest(SamplingParams(max_new_tokens=1), text="Hello", rid="m1")
        outputs = manager.generate(request)
        whole = asyncio.ensure_future(anext(outputs))
        await wait_until(lambda: "m1" in manager.rid_to_state)
        manager.handle_batch_str_output(step_output("m1", "Hi", 5, FinishReason("length"), 1))
        return await whole

    output = asyncio.run(scenario())
    assert (output.text, output.finish_reason.kind) == ("Hi", "length")
    assert manager.failures.counts[("metrics", None)] == 1


def test_the_worker_pids_an_api_worker_is_told_are_what_it_lists(manager):
    # As tercet.http's API worker does once the main process tells it every worker's process id.
    manager.worker_pids = {1: 101, 2: 102}
    assert manager.api_workers() == [
        {"worker": 1, "pid": 101, "is_this_one": True}, {"worker": 2, "pid": 102, "is_this_one": False}]
