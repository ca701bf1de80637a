"""Several API workers: each one's identity, and the routes that bring results back to it.

With ``server.api_workers = N`` each of N processes runs the HTTP app and a
TokenizerManager. The message types do not change: a worker writes its number
into every id it sends (request ids, control request ids) as a ``w<number>:``
prefix, and whoever sends a result (the detokenizer for outputs, a scheduler
for control replies) reads it back to choose the worker's result endpoint
(``PortArgs.tokenizer_inputs``). With one worker no id is tagged, as before;
an id without a tag belongs to worker 1, so a sender that does not know about
workers (a plugin, a test) still reaches one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_TAG = re.compile(r"w(\d+):")


@dataclass(frozen=True)
class ApiWorker:
    """Worker ``number`` (1-based, as ``ps`` shows it) of ``count``."""

    number: int = 1
    count: int = 1

    @property
    def title(self) -> str:
        return f"tercet api worker {self.number}"

    @property
    def prefix(self) -> str:
        return f"w{self.number}:" if self.count > 1 else ""

    def tag(self, rid: str) -> str:
        """The id ``rid`` travels under: unique across workers, and naming this one."""
        return self.prefix + rid

    def untag(self, rid: str) -> str:
        """The id the client knows: ``rid`` without this worker's tag."""
        return rid[len(self.prefix):] if self.prefix and rid.startswith(self.prefix) else rid

    def others(self) -> list["ApiWorker"]:
        return [ApiWorker(number, self.count) for number in range(1, self.count + 1) if number != self.number]


def owner_of(rid: str, num_workers: int) -> int:
    """The index (0-based) of the worker that sent ``rid``; worker 1's for an id with no worker's tag."""
    if num_workers == 1:
        return 0
    match = _TAG.match(rid)
    number = int(match.group(1)) if match else 1
    return number - 1 if 1 <= number <= num_workers else 0


def rows_by_owner(rids: Sequence[str], num_workers: int) -> dict[int, list[int]]:
    """The rows of a batch each worker owns, in batch order."""
    rows: dict[int, list[int]] = {}
    for row, rid in enumerate(rids):
        rows.setdefault(owner_of(rid, num_workers), []).append(row)
    return rows


def batch_rows(batch, rows: list[int]):
    """A copy of ``batch`` (a dataclass whose every field is a column of one value per row) with only ``rows``."""
    columns = {}
    for field in dataclasses.fields(batch):
        values = getattr(batch, field.name)
        # An optional column a sender left empty (phase_times) stays empty.
        columns[field.name] = [values[row] for row in rows] if values else values
    return type(batch)(**columns)


class ResultRoutes:
    """Senders to every worker's result endpoint, in worker order: a message goes to the worker
    owning its id, a batch is split between the workers owning its rows, a report goes to all."""

    def __init__(self, open_sender: Callable[[str], object], endpoints: Sequence[str]):
        self.senders = [open_sender(endpoint) for endpoint in endpoints]

    @property
    def num_workers(self) -> int:
        return len(self.senders)

    def send(self, message, owner_id: str) -> None:
        self.senders[owner_of(owner_id, self.num_workers)].send(message)

    def send_reply(self, reply) -> None:
        """A control reply, to the worker that asked."""
        self.send(reply, reply.request_id)

    def send_batch(self, batch) -> None:
        """A batch of outputs (one row per ``batch.rids``), each row to its worker."""
        if self.num_workers == 1:
            self.senders[0].send(batch)
            return
        for worker, rows in rows_by_owner(batch.rids, self.num_workers).items():
            self.senders[worker].send(batch if len(rows) == len(batch.rids) else batch_rows(batch, rows))

    def send_to_all(self, message) -> None:
        """What every worker keeps its own copy of (a rank's figures, a failure count)."""
        for sender in self.senders:
            sender.send(message)
