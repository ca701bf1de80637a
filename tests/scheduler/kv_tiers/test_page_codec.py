"""A page's bytes carry its key, dtype, shape and a checksum; anything else read back is refused."""

import pytest
import torch

from tercet.scheduler.kv_tiers.page_codec import PageCheckError, decode_page, encode_page

SHAPE = (2, 3, 4, 2, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_page_comes_back_as_it_went(dtype):
    values = torch.randn(SHAPE).to(dtype)
    assert torch.equal(decode_page(encode_page("k1", values), "k1", SHAPE, dtype), values)


def test_a_view_of_a_larger_tensor_is_stored_as_its_own_values():
    whole = torch.randn(2, 3, 8, 2, 5)
    page = whole[:, :, 4:8]
    assert torch.equal(decode_page(encode_page("k", page), "k", SHAPE, torch.float32), page)


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],
    lambda data: data[:20],
    lambda data: data[:60] + bytes([data[60] ^ 1]) + data[61:],
    lambda data: b"",
    lambda data: b"not a page at all",
])
def test_truncated_or_garbled_bytes_are_refused(damage):
    data = encode_page("k", torch.randn(SHAPE))
    with pytest.raises(PageCheckError):
        decode_page(damage(data), "k", SHAPE, torch.float32)


def test_another_pages_bytes_or_another_layout_are_refused():
    data = encode_page("k", torch.randn(SHAPE))
    with pytest.raises(PageCheckError, match="another page"):
        decode_page(data, "other", SHAPE, torch.float32)
    with pytest.raises(PageCheckError, match="another page"):
        decode_page(data, "k", (2, 3, 4, 2, 6), torch.float32)
    with pytest.raises(PageCheckError, match="another page"):
        decode_page(data, "k", SHAPE, torch.bfloat16)
