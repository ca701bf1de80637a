"""Small GGUF files with a byte-level vocabulary, written for tokenizer tests."""

from __future__ import annotations

from tercet.tokenizer.byte_level import byte_level_characters


def write_gguf(path, *, add_bos: bool | None, add_eos: bool | None = None, add_space_prefix: bool | None = None,
               extra_tokens=(), pre: str = "smollm", model: str = "gpt2", merges=("a b", "Ġ a", "Ġa b")):
    """A small llama GGUF with a byte-level vocabulary: control, user-defined and respelled tokens."""
    import gguf
    import numpy as np

    tokens = ["<|endoftext|>", "<s>", "</s>", "<think>", "<ctrl one>", "Ġ", "a", "b", "ab", "Ġa", "Ġab",
              "hello world", "日本", *extra_tokens]
    tokens += [char for char in byte_level_characters().values() if char not in tokens]
    types = [3, 3, 3, 4, 3] + [1] * (len(tokens) - 5)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if add_eos is not None:
        writer.add_add_eos_token(add_eos)
    if add_space_prefix is not None:
        writer.add_add_space_prefix(add_space_prefix)
    writer.add_chat_template("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}")
    for add, value in [(writer.add_context_length, 64), (writer.add_embedding_length, 8), (writer.add_block_count, 1),
                       (writer.add_feed_forward_length, 16), (writer.add_head_count, 2)]:
        add(value)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
