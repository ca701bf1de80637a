"""One model step over a batch: which tokens are new, where they sit, where their K/V go.

A batch may mix sequences prefilling a whole prompt (or a chunk of one) with
sequences decoding one token: the scheduler runs a single forward per step for
everything running. New tokens of all sequences are concatenated in sequence
order, so ``T = sum(extend_lens)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch


@dataclass(frozen=True)
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64, the new tokens
    positions: torch.Tensor  # [T] int64, position of each new token in its sequence
    out_cache_loc: torch.Tensor  # [T] int64, the KV slot each new token's K/V is written to
    req_pool_indices: torch.Tensor  # [B] int64, row of each sequence in the req_to_token table
    prefix_lens: torch.Tensor  # [B] int64, tokens already in the cache
    extend_lens: torch.Tensor  # [B] int64, new tokens this step (1 when decoding)
    seq_lens: torch.Tensor  # [B] int64, prefix_lens + extend_lens
    extend_start_loc: torch.Tensor  # [B] int64, index of each sequence's first new token in [T]
    max_extend_len: int
    max_seq_len: int
    num_tokens: int
    # extend_lens and seq_lens as the host built them, for host work (a plan, output
    # spans) that must not wait on the device to read them back. None in a CUDA
    # graph's static batch, whose lengths change at every replay.
    host_extend_lens: tuple[int, ...] | None
    host_seq_lens: tuple[int, ...] | None
    # The runs of rows that use a LoRA adapter (tercet.lora.lora_linear.AdapterRun); empty: the base model alone.
    lora_runs: tuple = ()

    @property
    def batch_size(self) -> int:
        return self.req_pool_indices.shape[0]

    @property
    def is_decode_only(self) -> bool:
        return self.max_extend_len == 1

    @property
    def last_token_indices(self) -> torch.Tensor:
        """Index in [T] of each sequence's last new token: the one whose logits we sample."""
        return self.extend_start_loc + self.extend_lens - 1

    def host_spans(self, sequence_indices: list[int]) -> tuple[list[int], list[int]]:
        """Where the new tokens of each sequence at ``sequence_indices`` start in [T], and how many there are."""
        if self.host_extend_lens is None:
            raise RuntimeError("this batch's lengths are not known on the host (a CUDA graph's static batch)")
        starts = list(accumulate(self.host_extend_lens[:-1], initial=0))
        return [starts[index] for index in sequence_indices], [self.host_extend_lens[index] for index in sequence_indices]

    @classmethod
    def build(
        cls,
        req_pool_indices: list[int],
        prefix_lens: list[int],
        new_token_ids: list[list[int]],
        req_to_token: torch.Tensor,
        device: torch.device | str,
    ) -> ForwardBatch:
        """Build a batch from host lists; the slots of every new position must already be assigned."""
        if not (len(req_pool_indices) == len(prefix_lens) == len(new_token_ids)):
            raise ValueError("req_pool_indices, prefix_lens and new_token_ids must have one entry per sequence")
        extend_lens = [len(token_ids) for token_ids in new_token_ids]
        if not extend_lens or min(extend_lens) < 1:
            raise ValueError("every sequence in a batch needs at least one new token")
        seq_lens = [prefix + extend for prefix, extend in zip(prefix_lens, extend_lens)]
        num_tokens = sum(extend_lens)
        batch_size = len(extend_lens)

        # One host→device copy for all per-sequence columns and one for the token ids.
        per_sequence = torch.tensor(
            [req_pool_indices, prefix_lens, extend_lens, seq_lens], dtype=torch.int64
        ).to(device, non_blocking=True)
        rows, prefix_lens_t, extend_lens_t, seq_lens_t = per_sequence.unbind(0)
        flat_ids = [token_id for token_ids in new_token_ids for token_id in token_ids]
        input_ids = torch.tensor(flat_ids, dtype=torch.int64).to(device, non_blocking=True)

        extend_start_loc = torch.cumsum(extend_lens_t, 0) - extend_lens_t
        sequence_of_token = torch.repeat_interleave(
            torch.arange(batch_size, device=device), extend_lens_t, output_size=num_tokens
        )
        offset_in_extend = torch.arange(num_tokens, device=device) - extend_start_loc[sequence_of_token]
        positions = prefix_lens_t[sequence_of_token] + offset_in_extend
        out_cache_loc = req_to_token[rows[sequence_of_token], positions]
        return cls(
            input_ids=input_ids,
            positions=positions,
            out_cache_loc=out_cache_loc,
            req_pool_indices=rows,
            prefix_lens=prefix_lens_t,
            extend_lens=extend_lens_t,
            seq_lens=seq_lens_t,
            extend_start_loc=extend_start_loc,
            max_extend_len=max(extend_lens),
            max_seq_len=max(seq_lens),
            num_tokens=num_tokens,
            host_extend_lens=tuple(extend_lens),
            host_seq_lens=tuple(seq_lens),
        )
