import dataclasses

import pytest
import torch

from tercet.model.forward_batch import ForwardBatch
from tercet.model.kv_cache import ReqToTokenPool


@pytest.fixture
def req_to_token():
    pool = ReqToTokenPool(max_requests=4, max_context_len=16, device="cpu")
    pool.assign_pages(2, 0, [3, 0], page_size=4)  # slots 12..15, 0..3
    pool.assign_pages(0, 0, [1, 2], page_size=4)  # slots 4..7, 8..11
    return pool.table


def test_mixed_batch_of_a_decode_and_a_prefill(req_to_token):
    batch = ForwardBatch.build(
        req_pool_indices=[2, 0],
        prefix_lens=[5, 0],
        new_token_ids=[[42], [7, 8, 9]],
        req_to_token=req_to_token,
        device="cpu",
    )
    assert batch.input_ids.tolist() == [42, 7, 8, 9]
    assert batch.positions.tolist() == [5, 0, 1, 2]
    assert batch.out_cache_loc.tolist() == [1, 4, 5, 6]
    assert batch.req_pool_indices.tolist() == [2, 0]
    assert batch.prefix_lens.tolist() == [5, 0]
    assert batch.extend_lens.tolist() == [1, 3]
    assert batch.seq_lens.tolist() == [6, 3]
    assert batch.extend_start_loc.tolist() == [0, 1]
    assert batch.last_token_indices.tolist() == [0, 3]
    assert (batch.max_extend_len, batch.max_seq_len, batch.num_tokens) == (3, 6, 4)
    assert batch.batch_size == 2 and not batch.is_decode_only
    assert all(t.dtype == torch.int64 for t in (batch.input_ids, batch.positions, batch.out_cache_loc, batch.seq_lens))


def test_chunk_continuing_a_prefix_starts_at_the_prefix(req_to_token):
    batch = ForwardBatch.build([0], [3], [[1, 2, 3, 4]], req_to_token, "cpu")
    assert batch.positions.tolist() == [3, 4, 5, 6]
    assert batch.out_cache_loc.tolist() == [7, 8, 9, 10]


def test_decode_only_batch(req_to_token):
    batch = ForwardBatch.build([0, 2], [7, 1], [[5], [6]], req_to_token, "cpu")
    assert batch.is_decode_only
    assert batch.positions.tolist() == [7, 1]
    assert batch.out_cache_loc.tolist() == [11, 13]
    assert batch.last_token_indices.tolist() == [0, 1]


def test_a_sequence_without_new_tokens_is_rejected(req_to_token):
    with pytest.raises(ValueError):
        ForwardBatch.build([0, 2], [0, 0], [[1], []], req_to_token, "cpu")
    with pytest.raises(ValueError):
        ForwardBatch.build([0], [0, 1], [[1]], req_to_token, "cpu")


def test_host_lengths_and_spans_need_no_read_back(req_to_token):
    batch = ForwardBatch.build([2, 0, 1], [5, 0, 0], [[42], [7, 8, 9], [1, 2]], req_to_token, "cpu")
    assert (batch.host_extend_lens, batch.host_seq_lens) == ((1, 3, 2), (6, 3, 2))
    assert batch.host_spans([1, 2]) == ([1, 4], [3, 2])
    assert batch.host_spans([0]) == ([0], [1])


def test_a_batch_without_host_lengths_says_so_when_asked_for_spans(req_to_token):
    batch = ForwardBatch.build([0], [0], [[1]], req_to_token, "cpu")
    static = dataclasses.replace(batch, host_extend_lens=None, host_seq_lens=None)
    with pytest.raises(RuntimeError, match="not known on the host"):
        static.host_spans([0])
