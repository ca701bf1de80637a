"""The GGUF reader: the default model's file against gguf's own reader, and every way a file can be broken."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import Counter

import gguf
import numpy as np
import pytest
from gguf_fixtures import random_llama_state_dict, truncated_copy, write_gguf, write_llama_gguf

from tercet.formats.default_model import find_default_gguf
from tercet.formats.gguf_file import GGML_TYPES, GgufError, GgufFile


@pytest.fixture(scope="module")
def reference_reader():
    return gguf.GGUFReader(str(find_default_gguf()))


@pytest.fixture(scope="module")
def tiny_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, tie_word_embeddings=True,
    )


@pytest.fixture
def tiny_gguf(tmp_path, tiny_config):
    """A small llama GGUF without tokenizer metadata: header, a few keys, nine tensors."""
    return write_llama_gguf(tmp_path / "tiny.gguf", random_llama_state_dict(tiny_config), tiny_config,
                            tensor_type="Q8_0", copy_tokenizer_from=None)


def test_the_default_gguf_has_its_known_header_and_tensors(default_gguf):
    assert default_gguf.version == 3
    assert len(default_gguf.tensors) == 272
    assert Counter(t.type_name for t in default_gguf.tensors.values()) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    embedding = default_gguf.tensors["token_embd.weight"]
    assert (embedding.type_name, embedding.shape) == ("Q8_0", (49152, 576))
    assert embedding.nbytes == 49152 * 576 // 32 * 34
    assert default_gguf.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)  # (rows N, columns K)
    assert default_gguf.tensors["blk.0.attn_norm.weight"].shape == (576,)


def test_the_default_gguf_metadata_has_python_values(default_gguf):
    metadata = default_gguf.metadata
    assert metadata["general.architecture"] == "llama"
    assert metadata["llama.block_count"] == 30
    assert metadata["llama.rope.freq_base"] == 100000.0
    assert metadata["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5, rel=1e-6)
    assert metadata["tokenizer.ggml.add_bos_token"] is False
    tokens = metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 49152 and tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert len(metadata["tokenizer.ggml.merges"]) == 48900 and metadata["tokenizer.ggml.merges"][0] == "Ġ t"
    token_type = metadata["tokenizer.ggml.token_type"]
    assert len(token_type) == 49152 and all(type(t) is int for t in token_type[:10])
    assert (metadata["tokenizer.ggml.bos_token_id"], metadata["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert "<|im_start|>" in metadata["tokenizer.chat_template"]


def test_metadata_and_tensor_table_equal_ggufs_own_reader(default_gguf, reference_reader):
    expected = {
        key: field.contents() for key, field in reference_reader.fields.items() if not key.startswith("GGUF.")
    }
    assert default_gguf.metadata == expected
    for reference in reference_reader.tensors:
        tensor = default_gguf.tensors[reference.name]
        assert tensor.type_name == reference.tensor_type.name
        assert tensor.shape == tuple(int(d) for d in reversed(reference.shape))
        assert (tensor.offset, tensor.nbytes) == (reference.data_offset, reference.n_bytes)


def test_tensor_bytes_is_a_read_only_view_of_the_map(default_gguf, reference_reader):
    raw = default_gguf.tensor_bytes("blk.0.attn_q.weight")
    assert raw.dtype == np.uint8 and raw.size == default_gguf.tensors["blk.0.attn_q.weight"].nbytes
    assert not raw.flags.owndata and not raw.flags.writeable
    reference = next(t for t in reference_reader.tensors if t.name == "blk.0.attn_q.weight")
    assert np.array_equal(raw, reference.data.reshape(-1))
    with pytest.raises(GgufError, match="no tensor named 'nope'"):
        default_gguf.tensor_bytes("nope")


def test_the_type_table_agrees_with_ggufs(default_gguf):
    for quant_type, (block_size, block_bytes) in gguf.GGML_QUANT_SIZES.items():
        # gguf-py still sizes Q8_1 with float32 d and s (40 bytes); ggml's block_q8_1 has two halves (36).
        if quant_type.value in GGML_TYPES and quant_type.name != "Q8_1":
            assert GGML_TYPES[quant_type.value] == (quant_type.name, block_size, block_bytes)
    assert GGML_TYPES[30][0] == "BF16"


def test_the_reader_does_not_import_torch():
    code = "import sys, tercet.formats.gguf_file; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_closing_releases_the_map_but_not_views_already_given(tiny_gguf):
    parsed = GgufFile(tiny_gguf)
    raw = parsed.tensor_bytes("output_norm.weight")
    expected = raw.copy()
    parsed.close()
    assert np.array_equal(raw, expected)
    with pytest.raises(GgufError, match="closed"):
        parsed.tensor_bytes("output_norm.weight")


def test_a_version_2_file_reads_like_version_3(tmp_path, tiny_gguf):
    data = bytearray(tiny_gguf.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    (tmp_path / "v2.gguf").write_bytes(data)
    v2, v3 = GgufFile(tmp_path / "v2.gguf"), GgufFile(tiny_gguf)
    assert v2.version == 2 and v2.metadata == v3.metadata and v2.tensors == v3.tensors


def test_a_custom_alignment_places_tensors_on_it(tmp_path, tiny_config):
    path = write_llama_gguf(tmp_path / "aligned.gguf", random_llama_state_dict(tiny_config), tiny_config,
                            tensor_type="Q8_0", copy_tokenizer_from=None, alignment=256)
    parsed, reference = GgufFile(path), gguf.GGUFReader(str(path))
    assert parsed.metadata["general.alignment"] == 256
    assert all(t.offset % 256 == 0 for t in parsed.tensors.values())
    for tensor in reference.tensors:
        assert np.array_equal(parsed.tensor_bytes(tensor.name), tensor.data.reshape(-1).view(np.uint8))


def test_a_bad_alignment_is_an_error(tmp_path):
    path = write_gguf(tmp_path / "a.gguf", "llama", {"general.alignment": (24, gguf.GGUFValueType.UINT32)}, {})
    with pytest.raises(GgufError, match="power of two, not 24"):
        GgufFile(path)


def test_a_file_that_is_not_gguf_is_named_in_the_error(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(GgufError, match=r"model\.bin: not a GGUF file \(it starts with b'PK"):
        GgufFile(path)
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GgufError, match="empty.gguf: not a GGUF file"):
        GgufFile(tmp_path / "empty.gguf")
    with pytest.raises(GgufError, match="missing.gguf: cannot read"):
        GgufFile(tmp_path / "missing.gguf")
    (tmp_path / "folder.gguf").mkdir()
    with pytest.raises(GgufError, match="folder.gguf: cannot read"):
        GgufFile(tmp_path / "folder.gguf")


@pytest.mark.parametrize(("version_bytes", "message"), [
    (struct.pack("<I", 1), "GGUF version 1 is not supported; supported: 2, 3"),
    (struct.pack("<I", 4), "GGUF version 4 is not supported"),
    (struct.pack(">I", 3), "big-endian"),
])
def test_an_unsupported_version_is_an_error(tmp_path, tiny_gguf, version_bytes, message):
    data = bytearray(tiny_gguf.read_bytes())
    data[4:8] = version_bytes
    (tmp_path / "v.gguf").write_bytes(data)
    with pytest.raises(GgufError, match=message):
        GgufFile(tmp_path / "v.gguf")


def _cut_points(path) -> dict[str, tuple[int, str]]:
    """Byte positions inside each part of ``path``'s layout, with what the error must say there."""
    data = path.read_bytes()
    tensors = GgufFile(path).tensors.values()
    first_data = min(t.offset for t in tensors)
    data_end = max(t.offset + t.nbytes for t in tensors)
    # The last metadata key: cutting there leaves room for the counts, so the reads themselves must notice.
    last_key, first_tensor = b"llama.rope.dimension_count", b"token_embd.weight"
    key_at, tensor_at = data.index(last_key), data.index(first_tensor)
    return {
        "header": (13, "while reading the header's tensor and key/value counts"),
        "metadata key": (key_at + 5, "metadata key #10 claims 26 bytes, but only 5 are left"),
        "metadata value": (key_at + len(last_key) + 6, f"while reading metadata {last_key.decode()!r}"),
        "tensor info": (tensor_at + 3, "the name of tensor #0 claims 17 bytes, but only 3 are left"),
        "tensor info dims": (tensor_at + len(first_tensor) + 6, "while reading tensor info of 'token_embd.weight'"),
        "tensor data": ((first_data + data_end) // 2, "needs bytes up to"),
        "last byte": (data_end - 1, f"needs bytes up to {data_end}, but the file has {data_end - 1} bytes"),
    }


@pytest.mark.parametrize("part", ["header", "metadata key", "metadata value", "tensor info", "tensor info dims",
                                  "tensor data", "last byte"])
def test_a_truncated_file_says_it_is_truncated(tmp_path, tiny_gguf, part):
    cut, expected = _cut_points(tiny_gguf)[part]
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:cut])
    with pytest.raises(GgufError, match=r"cut\.gguf: file is truncated") as error:
        GgufFile(truncated)
    assert expected in str(error.value)


def test_a_truncated_copy_of_the_default_model_is_reported(tmp_path):
    truncated = truncated_copy(find_default_gguf(), tmp_path / "smol.gguf", 0.9)
    with pytest.raises(GgufError, match=r"smol\.gguf: file is truncated: tensor .* needs bytes up to \d+, "
                                        rf"but the file has {truncated.stat().st_size} bytes"):
        GgufFile(truncated)


def test_a_truncated_copy_in_the_vocabulary_is_reported(tmp_path):
    # The tokens array sits in the first megabyte or so of the 98 MB file.
    truncated = truncated_copy(find_default_gguf(), tmp_path / "smol.gguf", 0.005)
    with pytest.raises(GgufError, match="file is truncated|cannot fit"):
        GgufFile(truncated)


@pytest.mark.parametrize(("field_offset", "value", "message"), [
    (8, 2**60, "tensor count 1152921504606846976 cannot fit"),
    (16, 2**40, "metadata key/value count 1099511627776 cannot fit"),
    (24, 2**62, "metadata key #0 claims 4611686018427387904 bytes"),  # the first key's length
])
def test_absurd_counts_are_rejected_before_allocating(tmp_path, tiny_gguf, field_offset, value, message):
    data = bytearray(tiny_gguf.read_bytes())
    data[field_offset : field_offset + 8] = struct.pack("<Q", value)
    (tmp_path / "corrupt.gguf").write_bytes(data)
    with pytest.raises(GgufError, match=message):
        GgufFile(tmp_path / "corrupt.gguf")


def test_an_absurd_array_length_is_rejected(tmp_path):
    # By hand: no tensors, one key holding an array that claims 2**50 uint32 items.
    key = b"tokenizer.ggml.token_type"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    (tmp_path / "a.gguf").write_bytes(header + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 4, 2**50))
    with pytest.raises(GgufError, match="'tokenizer.ggml.token_type''s array length 1125899906842624 cannot fit"):
        GgufFile(tmp_path / "a.gguf")


def _patch_tensor_info(path, name: str, dims: tuple[int, ...] | None = None, type_id: int | None = None):
    data = bytearray(path.read_bytes())
    encoded = name.encode()
    at = data.index(struct.pack("<Q", len(encoded)) + encoded) + 8 + len(encoded)
    (num_dims,) = struct.unpack_from("<I", data, at)
    if dims is not None:
        assert len(dims) == num_dims
        data[at + 4 : at + 4 + 8 * num_dims] = struct.pack(f"<{num_dims}Q", *dims)
    if type_id is not None:
        data[at + 4 + 8 * num_dims : at + 8 + 8 * num_dims] = struct.pack("<I", type_id)
    path.write_bytes(data)


def test_a_row_length_that_is_not_whole_blocks_is_an_error(tiny_gguf):
    # GGUF dims run fastest-first: (K, N). Q8_0 blocks are 32 wide; 48 is not whole blocks.
    _patch_tensor_info(tiny_gguf, "blk.0.attn_q.weight", dims=(48, 64))
    with pytest.raises(GgufError, match="'blk.0.attn_q.weight' of type Q8_0 has rows of 48 elements, "
                                        "not a multiple of its block size 32"):
        GgufFile(tiny_gguf)


def test_an_unknown_type_id_gets_a_placeholder_name(tiny_gguf):
    _patch_tensor_info(tiny_gguf, "blk.0.attn_q.weight", type_id=31)
    tensor = GgufFile(tiny_gguf).tensors["blk.0.attn_q.weight"]
    assert tensor.type_name == "type 31"
    assert tensor.nbytes > 0


def test_a_known_but_unread_type_keeps_its_name(tiny_gguf):
    _patch_tensor_info(tiny_gguf, "blk.0.attn_q.weight", dims=(256, 4), type_id=13)
    assert GgufFile(tiny_gguf).tensors["blk.0.attn_q.weight"].type_name == "Q5_K"


def test_invalid_utf8_in_a_key_is_an_error(tmp_path):
    path = write_gguf(tmp_path / "a.gguf", "llama", {"general.name": ("x", gguf.GGUFValueType.STRING)}, {})
    data = path.read_bytes().replace(b"general.name", b"general.n\xffme")
    path.write_bytes(data)
    with pytest.raises(GgufError, match="a.gguf: metadata key #1 is not valid UTF-8"):
        GgufFile(path)


def test_too_many_dimensions_is_an_error(tiny_gguf):
    data = bytearray(tiny_gguf.read_bytes())
    encoded = b"output_norm.weight"
    at = data.index(struct.pack("<Q", len(encoded)) + encoded) + 8 + len(encoded)
    data[at : at + 4] = struct.pack("<I", 7)
    tiny_gguf.write_bytes(data)
    with pytest.raises(GgufError, match="'output_norm.weight' has 7 dimensions; at most 4"):
        GgufFile(tiny_gguf)
