"""A page of K/V as bytes: a header naming its key, dtype and shape, the raw values, and a checksum.

``MAGIC | header length (4 bytes, little-endian) | header (JSON) | values | sha256(header + values)``.
A page read back is checked before use: the checksum over the header and the
values, and the header against the key asked for and the shape and dtype the
pool holds. A page that fails is a :class:`PageCheckError`, never K/V.
"""

from __future__ import annotations

import hashlib
import json
import struct

import torch

MAGIC = b"TKVP1\n"
DIGEST_BYTES = 32
_LENGTH = struct.Struct("<I")


class PageCheckError(ValueError):
    """Bytes that are not the page asked for: truncated, garbled, or another page's."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode_page(key: str, values: torch.Tensor) -> bytes:
    """The bytes of one page's ``values`` (any shape, on the CPU) stored under ``key``."""
    values = values.contiguous()
    header = json.dumps({"key": key, "dtype": dtype_name(values.dtype), "shape": list(values.shape)}).encode()
    payload = values.view(torch.uint8).numpy().tobytes() if values.numel() else b""
    digest = hashlib.sha256(header + payload).digest()
    return b"".join((MAGIC, _LENGTH.pack(len(header)), header, payload, digest))


def decode_page(data: bytes, key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The values of the page ``key``, checked; PageCheckError when ``data`` is not that page, whole."""
    header, payload = _checked_parts(data)
    if header.get("key") != key or header.get("dtype") != dtype_name(dtype) or header.get("shape") != list(shape):
        raise PageCheckError(f"it holds another page ({header.get('key')!r}, {header.get('dtype')}, "
                             f"{header.get('shape')})")
    expected = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if len(payload) != expected:
        raise PageCheckError(f"its values are {len(payload)} bytes, not {expected}")
    if not expected:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(payload, dtype=torch.uint8).view(dtype).reshape(shape)


def _checked_parts(data) -> tuple[dict, bytearray]:
    """The header and the values of ``data``, once its framing and checksum hold."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or bytes(data[:len(MAGIC)]) != MAGIC:
        raise PageCheckError("not a KV page (no page header)")
    start = len(MAGIC) + _LENGTH.size
    if len(data) < start + DIGEST_BYTES:
        raise PageCheckError("truncated before its header ends")
    (header_length,) = _LENGTH.unpack_from(data, len(MAGIC))
    body = memoryview(data)[start:len(data) - DIGEST_BYTES]
    if header_length > len(body) or hashlib.sha256(body).digest() != bytes(data[-DIGEST_BYTES:]):
        raise PageCheckError("its checksum does not match its bytes (truncated or corrupt)")
    return json.loads(bytes(body[:header_length])), bytearray(body[header_length:])
