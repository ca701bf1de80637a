"""Read a GGUF file (versions 2 and 3): its metadata, its tensor table, and each tensor's raw bytes.

Only the standard library and numpy, so the tokenizer process can read the
tokenizer metadata without importing torch. The file is memory-mapped: the
header is parsed from the map, and tensor data is handed out as uint8 views
of it, so nothing is copied until a caller decides how to unpack a tensor.

Every length and count in the header is checked against the bytes that are
actually left before anything is allocated, so a corrupt or truncated file
gives a :class:`GgufError` that names the file and what is wrong, never a
``struct.error`` or a multi-gigabyte allocation.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tercet.errors import ConfigError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# ggml's GGML_MAX_DIMS: no ggml tensor has more.
MAX_DIMS = 4

# ggml type id -> (name, elements per block, bytes per block). Types whose
# layout we do not unpack are listed too, so an error can name them.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

# Metadata value type id -> struct format of one scalar (little-endian).
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# numpy dtypes for arrays of scalars, read in one go rather than element by element.
_ARRAY_DTYPES = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 10: "<u8", 11: "<i8", 12: "<f8"}

# The fewest bytes one header entry can take, used to reject absurd counts
# before looping over them: a key/value is a key length (8), a value type (4)
# and at least a one-byte value; a tensor info is a name length (8), a dim
# count (4), a type (4) and an offset (8).
_MIN_KV_BYTES = 8 + 4 + 1
_LENGTH = struct.Struct("<Q")
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8
_MIN_ARRAY_ITEM_BYTES = {_STRING: 8, _ARRAY: 4 + 8, 7: 1, **{k: struct.calcsize(v) for k, v in _SCALAR_FORMATS.items()}}


class GgufError(ConfigError):
    """A GGUF file is malformed, truncated, or uses something tercet cannot read."""


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type_name: str
    # torch order: GGUF lists dims fastest-first, so they are reversed here and
    # a weight reads (rows N, columns K), with quantization blocks along K.
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int


# Parsed headers by (file, modification time, size), the newest few: treat them as read-only.
_HEADERS: dict[tuple, tuple] = {}
_HEADERS_KEPT = 4


class GgufFile:
    """A parsed GGUF file: ``version``, ``metadata``, ``tensors``, and ``tensor_bytes(name)``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            problem = "it is not a regular file" if self.path.exists() else "no such file"
            raise GgufError(f"{self.path}: cannot read the GGUF file: {problem}")
        try:
            file_size = self.path.stat().st_size
            if file_size < len(GGUF_MAGIC):
                raise GgufError(f"{self.path}: not a GGUF file (only {file_size} bytes)")
            self._map: np.memmap | None = np.memmap(self.path, dtype=np.uint8, mode="r")
        except OSError as error:
            raise GgufError(f"{self.path}: cannot read the GGUF file: {error.strerror or error}") from None
        # A process reads one file's header more than once (the model's config, its weights, its
        # tokenizer); parsing it is mostly decoding the vocabulary's 100k strings.
        version_key = (self.path.resolve(), self.path.stat().st_mtime_ns, file_size)
        try:
            header = _HEADERS.get(version_key) or self._read_header(file_size)
        except BaseException:
            self.close()
            raise
        _HEADERS[version_key] = header
        while len(_HEADERS) > _HEADERS_KEPT:
            del _HEADERS[next(iter(_HEADERS))]
        self.version, self.metadata, self.tensors = header

    def _read_header(self, file_size: int) -> tuple[int, dict[str, object], dict[str, GgufTensor]]:
        cursor = _Cursor(self.path, memoryview(self._map))
        version = _read_preamble(cursor)
        tensor_count, kv_count = cursor.unpack("<QQ", "the header's tensor and key/value counts")
        cursor.check_count(kv_count, _MIN_KV_BYTES, "metadata key/value count")
        cursor.check_count(tensor_count, _MIN_TENSOR_INFO_BYTES, "tensor count")
        metadata = _read_metadata(cursor, kv_count)
        alignment = _alignment_of(self.path, metadata)
        infos = [_read_tensor_info(cursor, index) for index in range(tensor_count)]
        data_start = -(-cursor.position // alignment) * alignment
        return version, metadata, _place_tensors(self.path, infos, data_start, alignment, file_size)

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The tensor's data as a uint8 view of the memory map (no copy)."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise GgufError(f"{self.path}: has no tensor named {name!r}")
        if self._map is None:
            raise GgufError(f"{self.path}: is closed")
        return self._map[tensor.offset : tensor.offset + tensor.nbytes]

    def close(self) -> None:
        # Views already handed out keep the mapping alive until they are
        # dropped; closing only releases this object's hold on it.
        self._map = None

    def __enter__(self) -> GgufFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GgufFile({str(self.path)!r}, version={self.version}, tensors={len(self.tensors)})"


class _Cursor:
    """Reads the header left to right, turning a short read into a GgufError that says what was being read."""

    def __init__(self, path: Path, buffer: memoryview):
        self.path = path
        self.buffer = buffer
        self.position = 0

    @property
    def remaining(self) -> int:
        return len(self.buffer) - self.position

    def truncated(self, what: str) -> GgufError:
        return GgufError(
            f"{self.path}: file is truncated: it ends at byte {len(self.buffer)} while reading {what}"
        )

    def unpack(self, fmt: str, what: str) -> tuple:
        size = struct.calcsize(fmt)
        if size > self.remaining:
            raise self.truncated(what)
        values = struct.unpack_from(fmt, self.buffer, self.position)
        self.position += size
        return values

    def take(self, size: int, what: str) -> memoryview:
        if size > self.remaining:
            raise self.truncated(what)
        chunk = self.buffer[self.position : self.position + size]
        self.position += size
        return chunk

    def string(self, what: str) -> str:
        (length,) = self.unpack("<Q", what)
        if length > self.remaining:
            raise GgufError(
                f"{self.path}: file is truncated or its header corrupt: {what} claims {length} bytes, "
                f"but only {self.remaining} are left"
            )
        raw = self.take(length, what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise GgufError(f"{self.path}: {what} is not valid UTF-8") from None

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` length-prefixed UTF-8 strings (``what[i]`` in errors), in one tight loop:
        a vocabulary and its merges are 100k of them, read at every start."""
        buffer, position, end = self.buffer, self.position, len(self.buffer)
        read_length = _LENGTH.unpack_from
        strings: list[str] = []
        append = strings.append
        try:
            for index in range(count):
                if position + 8 > end:
                    raise self.truncated(f"{what}[{index}]")
                (length,) = read_length(buffer, position)
                position += 8
                if length > end - position:
                    raise GgufError(
                        f"{self.path}: file is truncated or its header corrupt: {what}[{index}] claims {length} "
                        f"bytes, but only {end - position} are left"
                    )
                try:
                    append(str(buffer[position : position + length], "utf-8"))
                except UnicodeDecodeError:
                    raise GgufError(f"{self.path}: {what}[{index}] is not valid UTF-8") from None
                position += length
        finally:
            self.position = position
        return strings

    def check_count(self, count: int, min_item_bytes: int, what: str) -> None:
        if count * min_item_bytes > self.remaining:
            raise GgufError(
                f"{self.path}: file is truncated or its header corrupt: {what} {count} "
                f"cannot fit in the {self.remaining} bytes left"
            )


def _read_preamble(cursor: _Cursor) -> int:
    magic = bytes(cursor.buffer[: len(GGUF_MAGIC)])
    if magic != GGUF_MAGIC:
        raise GgufError(f"{cursor.path}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    cursor.position = len(GGUF_MAGIC)
    (version,) = cursor.unpack("<I", "the GGUF version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and version >> 24 in SUPPORTED_VERSIONS:
            raise GgufError(f"{cursor.path}: is a big-endian GGUF, which tercet cannot read")
        raise GgufError(
            f"{cursor.path}: GGUF version {version} is not supported; supported: "
            + ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        )
    return version


def _read_metadata(cursor: _Cursor, kv_count: int) -> dict[str, object]:
    metadata: dict[str, object] = {}
    for index in range(kv_count):
        key = cursor.string(f"metadata key #{index}")
        (value_type,) = cursor.unpack("<I", f"the type of metadata {key!r}")
        if key in metadata:
            raise GgufError(f"{cursor.path}: metadata key {key!r} appears twice")
        metadata[key] = _read_value(cursor, value_type, f"metadata {key!r}")
    return metadata


def _read_value(cursor: _Cursor, value_type: int, what: str) -> object:
    if value_type == _STRING:
        return cursor.string(what)
    if value_type == _ARRAY:
        return _read_array(cursor, what)
    scalar_format = _SCALAR_FORMATS.get(value_type)
    if scalar_format is None:
        raise GgufError(f"{cursor.path}: {what} has unknown value type {value_type}")
    return cursor.unpack("<" + scalar_format, what)[0]


def _read_array(cursor: _Cursor, what: str) -> list:
    item_type, count = cursor.unpack("<IQ", what)
    min_item_bytes = _MIN_ARRAY_ITEM_BYTES.get(item_type)
    if min_item_bytes is None:
        raise GgufError(f"{cursor.path}: {what} is an array of unknown value type {item_type}")
    cursor.check_count(count, min_item_bytes, f"{what}'s array length")
    dtype = _ARRAY_DTYPES.get(item_type)
    if dtype is not None:
        # Numeric arrays (token types, scores) are read in one numpy call.
        raw = cursor.take(count * np.dtype(dtype).itemsize, what)
        return np.frombuffer(raw, dtype=dtype).tolist()
    if item_type == 7:
        return [bool(b) for b in cursor.take(count, what)]
    if item_type == _STRING:
        # Vocabularies and merges: length-prefixed, so walked one by one, without a call per string.
        return cursor.strings(count, what)
    return [_read_value(cursor, item_type, f"{what}[{i}]") for i in range(count)]


def _alignment_of(path: Path, metadata: dict[str, object]) -> int:
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"{path}: general.alignment must be a positive power of two, not {alignment!r}")
    return alignment


@dataclass(frozen=True)
class _TensorInfo:
    name: str
    type_id: int
    gguf_dims: tuple[int, ...]  # fastest-varying first, as stored
    relative_offset: int


def _read_tensor_info(cursor: _Cursor, index: int) -> _TensorInfo:
    name = cursor.string(f"the name of tensor #{index}")
    what = f"tensor info of {name!r}"
    (num_dims,) = cursor.unpack("<I", what)
    if num_dims > MAX_DIMS:
        raise GgufError(f"{cursor.path}: tensor {name!r} has {num_dims} dimensions; at most {MAX_DIMS} are allowed")
    dims = cursor.unpack(f"<{num_dims}Q", what)
    type_id, relative_offset = cursor.unpack("<IQ", what)
    return _TensorInfo(name, type_id, dims, relative_offset)


def _place_tensors(
    path: Path, infos: list[_TensorInfo], data_start: int, alignment: int, file_size: int
) -> dict[str, GgufTensor]:
    # Only known types have a computable size; an unknown one is given the
    # bytes up to the next tensor (or the end of the file), an upper bound.
    starts = sorted({data_start + info.relative_offset for info in infos} | {file_size})
    tensors: dict[str, GgufTensor] = {}
    for info in infos:
        if info.name in tensors:
            raise GgufError(f"{path}: tensor {info.name!r} appears twice")
        offset = data_start + info.relative_offset
        if info.relative_offset % alignment:
            raise GgufError(
                f"{path}: tensor {info.name!r} starts at data offset {info.relative_offset}, "
                f"not a multiple of the alignment {alignment}"
            )
        known = GGML_TYPES.get(info.type_id)
        if known is None:
            type_name = f"type {info.type_id}"
            following = [start for start in starts if start > offset]
            nbytes = (following[0] if following else offset) - offset
        else:
            type_name, block_size, block_bytes = known
            nbytes = _nbytes_of(path, info, type_name, block_size, block_bytes)
        if offset + nbytes > file_size:
            raise GgufError(
                f"{path}: file is truncated: tensor {info.name!r} needs bytes up to {offset + nbytes}, "
                f"but the file has {file_size} bytes"
            )
        tensors[info.name] = GgufTensor(info.name, type_name, tuple(reversed(info.gguf_dims)), offset, nbytes)
    return tensors


def _nbytes_of(path: Path, info: _TensorInfo, type_name: str, block_size: int, block_bytes: int) -> int:
    row_length = info.gguf_dims[0] if info.gguf_dims else 1
    if row_length % block_size:
        raise GgufError(
            f"{path}: tensor {info.name!r} of type {type_name} has rows of {row_length} elements, "
            f"not a multiple of its block size {block_size}"
        )
    num_elements = 1
    for dim in info.gguf_dims:
        num_elements *= dim
    return num_elements // block_size * block_bytes
