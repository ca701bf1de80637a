"""A request's outputs on their way to its caller: merged per completion, as they come or whole."""

from __future__ import annotations

import asyncio

from tercet.frontend.completion_outputs import merge_outputs, outputs_as_they_come
from tercet.frontend.io_struct import GenerateOutput
from tercet.frontend.req_state import ReqState
from tercet.ipc.messages import FinishReason, TokenLogprobs

DONE = FinishReason("length")


def piece(text: str, token_id: int, index: int = 0, finish=None, logprob: float = -0.5) -> GenerateOutput:
    logprobs = TokenLogprobs([token_id], [logprob], [[]])
    return GenerateOutput("r", text, [token_id], finish, 2, 1, index=index, output_logprobs=logprobs)


def test_merging_joins_the_deltas_and_keeps_the_latest_counts_and_finish():
    merged = merge_outputs([piece("Hel", 5), piece("lo", 6, finish=DONE, logprob=-1.0)])
    assert (merged.text, merged.token_ids, merged.finish_reason) == ("Hello", [5, 6], DONE)
    assert merged.output_logprobs.logprobs == [-0.5, -1.0]
    alone = piece("Hi", 7)
    assert merge_outputs([alone]) is alone


def arrive(states: dict[str, ReqState], pieces: list[GenerateOutput]) -> None:
    """What the TokenizerManager's handle_loop does with outputs: append them, mark the finished, wake the caller."""
    for output in pieces:
        state = list(states.values())[output.index]
        state.out_list.append(output)
        state.finished = state.finished or output.finished
        state.event.set()


def collect(stream: bool) -> list[GenerateOutput]:
    """The outputs of two completions whose pieces arrive in two rounds, the caller taking them as it goes."""

    async def scenario():
        event = asyncio.Event()
        states = {"r#0": ReqState(0, event), "r#1": ReqState(1, event)}
        taken: list[GenerateOutput] = []

        async def take():
            async for output in outputs_as_they_come(states, event, stream):
                taken.append(output)

        caller = asyncio.ensure_future(take())
        arrive(states, [piece("a", 1, 0), piece("b", 2, 0), piece("x", 3, 1, DONE)])
        for _ in range(10):  # the caller takes what is there
            await asyncio.sleep(0)
        arrive(states, [piece("c", 4, 0, DONE)])
        await asyncio.wait_for(caller, 5)
        return taken

    return asyncio.run(scenario())


def test_streamed_outputs_come_merged_per_completion_as_they_arrive():
    assert [(o.index, o.text, o.finished) for o in collect(stream=True)] == [
        (0, "ab", False), (1, "x", True), (0, "c", True),
    ]


def test_whole_outputs_come_once_every_completion_has_finished():
    assert [(o.index, o.text, o.token_ids) for o in collect(stream=False)] == [(0, "abc", [1, 2, 4]), (1, "x", [3])]
