"""The device the tests run on: the CPU, or CUDA in the ``cuda`` lane (``TERCET_TEST_DEVICE=cuda``).

Tests marked ``cuda`` need a GPU: tests/conftest.py skips them, with the
reason, unless ``TERCET_TEST_DEVICE=cuda``; then ``pytest -m cuda`` runs the
lane whole, and a machine that has no CUDA device is an error, not a skip.
"""

from __future__ import annotations

import os

DEVICE_VARIABLE = "TERCET_TEST_DEVICE"


def device_name() -> str:
    return os.environ.get(DEVICE_VARIABLE, "cpu") or "cpu"


def in_cuda_lane() -> bool:
    return device_name().startswith("cuda")
