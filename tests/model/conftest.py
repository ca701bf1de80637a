"""Fixtures shared by the model tests."""

import pytest

from tercet.model.default_model import find_default_gguf
from tercet.model.gguf_file import GgufFile


@pytest.fixture(scope="module")
def default_gguf():
    """The default model's GGUF, parsed (its tensors stay in the file until read)."""
    with GgufFile(find_default_gguf()) as parsed:
        yield parsed
