"""What the TokenizerManager holds for one request in flight until its caller has consumed it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tercet.frontend.io_struct import EmbeddingOutput, GenerateOutput


@dataclass
class ReqState:
    """One completion's outputs not yet consumed (or one embedding input's result).
    The completions of a request (n per prompt) share one event, so their caller
    wakes for any of them."""

    index: int
    event: asyncio.Event
    out_list: list[GenerateOutput | EmbeddingOutput] = field(default_factory=list)
    finished: bool = False
    # When the API received the request and sent it to a scheduler (Unix times), for its trace
    # (tercet.frontend.request_traces); sent_at is stamped only while traces are on.
    received_at: float = 0.0
    sent_at: float = 0.0
