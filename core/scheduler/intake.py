"""What the scheduler checks of a generate request before it holds any state for it.

The TokenizerManager validates requests at the HTTP edge, but edge 1 is a
socket, and over the tcp transport anything that can connect can send. A
request the model cannot run (a token id outside the vocabulary, a prompt
longer than a KV table row, sampling values out of range) would otherwise
fail inside the forward or the KV allocator, where a failure ends the
process; here it fails alone, with a 400.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.ipc.messages import TokenizedGenerateReq


def check_generate_request(message: TokenizedGenerateReq, vocab_size: int) -> None:
    """Raise :class:`RequestError` naming what the scheduler cannot run."""
    if not message.rid:
        raise RequestError("the request id is empty", "rid")
    if not message.input_ids:
        raise RequestError("the prompt is empty", "prompt")
    if not all(0 <= token_id < vocab_size for token_id in message.input_ids):
        raise RequestError(f"prompt token ids must be in [0, {vocab_size})", "input_ids")
    params = message.sampling_params
    params.validate(vocab_size)

