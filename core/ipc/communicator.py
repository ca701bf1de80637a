"""The Communicator: one control request to every data-parallel rank, their replies merged.

Modes, per request type:
- ``serial``: one call in flight; later callers queue behind it;
- ``shared``: a caller arriving while a call is in flight shares its result
  (for read-only questions such as internal state, so probes do not pile up).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Callable

from tercet.errors import RequestError
from tercet.ipc.control_messages import ControlReply, ControlRequest


class Communicator:
    def __init__(self, request_type: type[ControlRequest], send_to_all_ranks: Callable[[ControlRequest], None],
                 num_ranks: int, mode: str = "serial", tag_request_id: Callable[[str], str] = str):
        if mode not in ("serial", "shared"):
            raise ValueError(f"unknown communicator mode {mode!r}; use serial or shared")
        self.request_type = request_type
        self.send_to_all_ranks = send_to_all_ranks
        self.num_ranks = num_ranks
        self.mode = mode
        # With several API workers the id names the asking one, whom the ranks reply to.
        self.tag_request_id = tag_request_id
        self.lock = asyncio.Lock()
        self.in_flight: asyncio.Future | None = None
        self.request_id: str | None = None
        self.replies: list[ControlReply] = []
        self.all_replied: asyncio.Event | None = None

    async def call(self, timeout: float, **fields) -> list[ControlReply]:
        """Every rank's reply, sorted by rank; a 504 RequestError if some rank does not answer in time."""
        if self.mode == "shared" and self.in_flight is not None:
            return await asyncio.shield(self.in_flight)
        async with self.lock:
            self.in_flight = asyncio.get_running_loop().create_future()
            try:
                replies = await self._round_trip(timeout, fields)
            except BaseException as error:
                self.in_flight.set_exception(error)
                self.in_flight.exception()  # retrieved: sharers get it, nobody else must
                raise
            else:
                self.in_flight.set_result(replies)
                return replies
            finally:
                self.in_flight = None

    async def _round_trip(self, timeout: float, fields: dict) -> list[ControlReply]:
        self.request_id = self.tag_request_id(uuid.uuid4().hex)
        self.replies = []
        self.all_replied = asyncio.Event()
        self.send_to_all_ranks(self.request_type(request_id=self.request_id, **fields))
        try:
            await asyncio.wait_for(self.all_replied.wait(), timeout)
        except asyncio.TimeoutError:
            answered = sorted(reply.rank for reply in self.replies)
            raise RequestError(
                f"{self.request_type.__name__}: {len(answered)} of {self.num_ranks} ranks answered "
                f"within {timeout:g} s (answered: {answered})",
                status_code=504,
            ) from None
        finally:
            self.request_id = None
        return sorted(self.replies, key=lambda reply: reply.rank)

    def handle_reply(self, reply: ControlReply) -> None:
        if reply.request_id != self.request_id:
            return  # a late reply to a call that already timed out
        self.replies.append(reply)
        if len(self.replies) == self.num_ranks:
            self.all_replied.set()
