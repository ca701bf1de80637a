"""The messages of a tensor-parallel group: TP rank 0 receives, every rank handles the same.

Only TP rank 0 binds the scheduler's input socket. Each turn of the loop it
takes what has arrived and broadcasts that list to its peers
(``torch.distributed.broadcast_object_list``), so every rank dispatches the
same messages in the same order, and, scheduling being deterministic, makes
the same decisions and runs the same batch: the collectives inside the model
line up. Peers send nothing: rank 0 alone answers the detokenizer and the
TokenizerManager (:class:`SilentSender` stands in on the others).

An idle rank 0 waits for a message at most ``IDLE_SYNC_MS`` before
broadcasting an empty list, so peers blocked in the broadcast hear from it
well within any collective timeout.
"""

from __future__ import annotations

import dataclasses
import secrets

from tercet.ipc.messages import TokenizedGenerateReq
from tercet.model.tensor_parallel import TensorParallel

IDLE_SYNC_MS = 5_000


class SilentSender:
    """What a TP peer sends to: nothing leaves it (rank 0 sends for the group)."""

    def send(self, message) -> None:
        pass

    def close(self) -> None:
        pass


class TensorParallelInbox:
    def __init__(self, tp: TensorParallel, receiver=None):
        """``receiver``: rank 0's bound input socket (None on the peers)."""
        if (receiver is None) != (tp.rank != 0):
            raise ValueError("TP rank 0, and only it, receives")
        self.tp = tp
        self.receiver = receiver

    def take(self, block: bool, poll_ms: int | None) -> list:
        """This turn's messages, the same list on every rank. ``block``: wait for one
        (up to ``poll_ms``, or ``IDLE_SYNC_MS`` when None) before taking what is there."""
        import torch.distributed as dist

        box: list = [None]
        if self.receiver is not None:
            if block:
                self.receiver.poll(timeout_ms=min(poll_ms, IDLE_SYNC_MS) if poll_ms is not None else IDLE_SYNC_MS)
            box[0] = [_with_fixed_seed(message) for message in self.receiver.receive_pending()]
        dist.broadcast_object_list(box, src=0, group=self.tp.group)
        return box[0]


def _with_fixed_seed(message):
    # A request without a seed would draw one on each rank: rank 0 draws it for all.
    if isinstance(message, TokenizedGenerateReq) and message.sampling_params.seed is None:
        params = dataclasses.replace(message.sampling_params, seed=secrets.randbits(63))
        return dataclasses.replace(message, sampling_params=params)
    return message
