"""How a request's outputs reach its caller: per completion, as they come or whole.

The TokenizerManager's ``handle_loop`` appends each completion's pieces to its
:class:`ReqState` and sets the request's one event; the caller, waiting on that
event, takes them from here: streamed, each completion's new pieces merged into
one output per wake-up; otherwise one whole output per completion once all
have finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from tercet.frontend.io_struct import GenerateOutput
from tercet.frontend.req_state import ReqState
from tercet.ipc.messages import TokenLogprobs


async def outputs_as_they_come(
    states: dict[str, ReqState], event: asyncio.Event, stream: bool
) -> AsyncIterator[GenerateOutput]:
    """The request's outputs, in completion order within each wake-up (whole ones: in completion order)."""
    if stream:
        async for _, pieces in _arrivals(states, event):
            if pieces:
                yield merge_outputs(pieces)
        return
    collected: dict[str, list[GenerateOutput]] = {choice: [] for choice in states}
    async for choice, pieces in _arrivals(states, event):
        collected[choice].extend(pieces)
    for pieces in collected.values():
        yield merge_outputs(pieces)


async def _arrivals(states: dict[str, ReqState], event: asyncio.Event) -> AsyncIterator[tuple[str, list]]:
    """``(completion id, its pieces since the last time)`` for every completion, each
    time the event is set, until all have finished and nothing is left to take."""
    while True:
        await event.wait()
        event.clear()
        # Index 0 first, so the piece carrying the prompt's log-probabilities leads.
        for choice, state in states.items():
            pieces, state.out_list = state.out_list, []
            yield choice, pieces
        # Outputs that came in while the caller was suspended at a yield are
        # still in out_list (with the event set): go round again.
        if all(state.finished and not state.out_list for state in states.values()):
            return


def merge_outputs(pieces: list[GenerateOutput]) -> GenerateOutput:
    """Join consecutive deltas of one completion (the latest counts and finish reason win)."""
    if len(pieces) == 1:
        return pieces[0]
    last = pieces[-1]
    return dataclasses.replace(
        last,
        text="".join(piece.text for piece in pieces),
        token_ids=[token for piece in pieces for token in piece.token_ids],
        output_logprobs=TokenLogprobs.concat([piece.output_logprobs for piece in pieces]),
        prompt_logprobs=next((p.prompt_logprobs for p in pieces if p.prompt_logprobs is not None), None),
    )
