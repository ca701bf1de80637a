"""row_argmax gives exactly what argmax gives: first index of the largest, NaN winning."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.model.row_argmax import BLOCK, MIN_VOCAB, row_argmax

VOCABS = [MIN_VOCAB, 4 * BLOCK + 1, 49152, 32000, 5 * BLOCK - 1]


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_rows_match_argmax(vocab, dtype):
    logits = torch.randn(16, vocab, generator=torch.Generator().manual_seed(vocab)).to(dtype)
    assert torch.equal(row_argmax(logits), logits.argmax(dim=-1))


@settings(max_examples=60, deadline=None)
@given(
    vocab=st.sampled_from(VOCABS),
    num_rows=st.integers(1, 4),
    # Few distinct values, so the largest repeats across blocks and inside them.
    levels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    special=st.sampled_from([None, "nan", "-inf", "inf"]),
)
def test_ties_and_special_values_match_argmax(vocab, num_rows, levels, seed, special):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (num_rows, vocab), generator=generator).float()
    if special is not None:
        positions = torch.randint(0, vocab, (num_rows, 2), generator=generator)
        logits.scatter_(1, positions, float(special))
    assert torch.equal(row_argmax(logits), logits.argmax(dim=-1))


@pytest.mark.parametrize("vocab", [4 * BLOCK, 4 * BLOCK + 7])
def test_rows_that_are_all_minus_infinity_give_index_zero(vocab):
    logits = torch.full((2, vocab), float("-inf"))
    logits[1, -1] = 0.0  # the largest value sits in the partial last block
    assert row_argmax(logits).tolist() == logits.argmax(dim=-1).tolist() == [0, vocab - 1]


def test_small_vocabularies_and_strided_rows_are_still_right():
    small = torch.randn(3, MIN_VOCAB - 1)
    assert torch.equal(row_argmax(small), small.argmax(dim=-1))
    # Every other column of a wider tensor: not contiguous along the row.
    strided = torch.randn(3, 2 * 49152)[:, ::2]
    assert torch.equal(row_argmax(strided), strided.argmax(dim=-1))
    # A row-slice of a wider tensor: contiguous along the row, with a larger row stride.
    sliced = torch.randn(3, 50000)[:, 1:49153]
    assert torch.equal(row_argmax(sliced), sliced.argmax(dim=-1))
