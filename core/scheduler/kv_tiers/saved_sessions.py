"""Saved sessions: a conversation's cached prefix written to a file under a name, and read back.

``<file tier's directory>/sessions/<name>.session`` holds one JSON line (the
name, the LoRA namespace, the prefix's token ids: whole pages only) and then
the prefix's K/V as one page of :mod:`.page_codec` under the key of its last
page. That key hashes the token ids and the model's identity, so a restore
checks, with the checksum, that the file is whole and was saved by this
model with this KV layout. Saving takes the prefix's pages from the pool and,
past what the pool holds, from the tier; restoring puts them into the pool and
the radix tree, as a read-back does. Files are written to a temporary name and
renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from tercet.errors import RequestError
from tercet.scheduler.kv_tiers.page_codec import PageCheckError, decode_page, encode_page
from tercet.scheduler.kv_tiers.page_install import install_pages
from tercet.scheduler.kv_tiers.session_names import check_session_name


class SavedSessions:
    def __init__(self, directory: Path, tiers):
        self.directory = Path(directory)
        self.tiers = tiers

    def path_of(self, name: str) -> Path:
        return self.directory / f"{check_session_name(name)}.session"

    def save(self, name: str, token_ids: list[int], namespace: str | None = None) -> dict:
        """Write what the pool and the tier hold of the prefix ``token_ids``; how many tokens that is."""
        path = self.path_of(name)
        values = self.tiers.prefix_values(token_ids, namespace)
        if not values:
            raise RequestError("nothing of this prefix is cached (send the tokens, text or messages of a "
                               "conversation the server has just served)", "name", 404)
        size = self.tiers.page_keys.page_size
        tokens = list(token_ids[:len(values) * size])
        key = self.tiers.page_keys.keys(tokens, namespace)[-1]
        header = json.dumps({"name": name, "namespace": namespace, "token_ids": tokens}).encode() + b"\n"
        page = encode_page(key, torch.cat(values, dim=2))
        self.directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(header + page)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return {"name": name, "saved_tokens": len(tokens), "bytes": len(header) + len(page)}

    def restore(self, name: str) -> dict:
        """Put the session's prefix into the pool; how many of its tokens the pool now holds."""
        path = self.path_of(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RequestError(f"no saved session named {name!r}", "name", 404) from None
        header_line, _, page = data.partition(b"\n")
        try:
            header = json.loads(header_line)
            tokens, namespace = list(header["token_ids"]), header.get("namespace")
            keys = self.tiers.page_keys.keys(tokens, namespace)
            shape = list(self.tiers.pool_pages.page_shape)
            shape[2] *= len(keys)
            values = decode_page(page, keys[-1] if keys else "", tuple(shape), self.tiers.pool_pages.dtype)
        except (ValueError, KeyError, TypeError, PageCheckError) as error:
            raise RequestError(f"the saved session {name!r} cannot be restored: it is corrupt or was saved by "
                               f"another model or KV layout ({error})", "name", 409) from None
        size = self.tiers.page_keys.page_size
        page_values = [values[:, :, index * size:(index + 1) * size] for index in range(len(keys))]
        restored = install_pages(self.tiers.radix_cache, self.tiers.pool_pages, tokens, namespace, 0, page_values)
        return {"name": name, "restored_tokens": restored, "session_tokens": len(tokens)}
