"""Token bitmasks unpacked and applied to the constrained rows only."""

import torch

from tercet.model.token_bitmask import allowed_tokens, mask_rows, new_bitmask


def test_each_bit_allows_its_token_the_sign_bit_included():
    bitmask = new_bitmask(1, 70)
    for token_id in (0, 31, 32, 69):
        word, bit = divmod(token_id, 32)
        bitmask[0, word] |= torch.tensor(1 << bit).to(torch.int32) if bit < 31 else torch.tensor(-(1 << 31), dtype=torch.int32)
    allowed = allowed_tokens(bitmask, 70)
    assert allowed.shape == (1, 70)
    assert allowed[0].nonzero().flatten().tolist() == [0, 31, 32, 69]


def test_only_the_named_rows_are_masked_and_the_input_is_left_alone():
    logits = torch.randn(3, 40)
    original = logits.clone()
    bitmask = new_bitmask(1, 40)
    bitmask[0, 0] = 0b1010  # tokens 1 and 3
    masked = mask_rows(logits, [1], bitmask)
    assert torch.equal(logits, original)
    assert torch.equal(masked[0], original[0]) and torch.equal(masked[2], original[2])
    assert torch.isfinite(masked[1]).nonzero().flatten().tolist() == [1, 3]
    assert masked[1, 3] == original[1, 3]
