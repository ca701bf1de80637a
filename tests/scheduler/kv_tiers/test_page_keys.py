"""A page's key hashes its whole token chain, the model's identity and the LoRA namespace."""

from tercet.scheduler.kv_tiers.page_keys import PageKeys, checkpoint_fingerprint

IDENTITY = {"model_path": "/m", "kv_dtype": "float32", "page_size": 4}


def test_a_pages_key_depends_on_every_token_before_it_not_after():
    keys = PageKeys(IDENTITY, 4)
    base = keys.keys(list(range(12)), None)
    assert len(base) == 3 and len(set(base)) == 3
    assert keys.keys(list(range(12)) + [99, 98], None) == base  # a partial page has no key
    changed_first = keys.keys([7] + list(range(1, 12)), None)
    assert all(a != b for a, b in zip(changed_first, base))  # page 0 changed: every later key too
    changed_last = keys.keys(list(range(11)) + [42], None)
    assert changed_last[:2] == base[:2] and changed_last[2] != base[2]
    assert keys.keys(list(range(12)), None, num_pages=2) == base[:2]


def test_the_model_identity_and_the_namespace_separate_keys():
    tokens = list(range(8))
    base = PageKeys(IDENTITY, 4).keys(tokens, None)
    assert PageKeys(IDENTITY, 4).keys(tokens, None) == base  # the same server after a restart
    assert PageKeys({**IDENTITY, "kv_dtype": "bfloat16"}, 4).keys(tokens, None)[0] != base[0]
    assert PageKeys(IDENTITY, 4).keys(tokens, "adapter")[0] != base[0]


def test_a_checkpoints_fingerprint_changes_when_its_weights_file_does(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"12")
    (tmp_path / "notes.txt").write_text("ignored")
    before = checkpoint_fingerprint(tmp_path)
    assert [entry[0] for entry in before] == ["config.json", "model.safetensors"]
    (tmp_path / "model.safetensors").write_bytes(b"123")
    assert checkpoint_fingerprint(tmp_path) != before
