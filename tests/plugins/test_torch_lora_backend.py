"""The torch LoRA backend: each segment's delta lands on its rows and its parts' columns only."""

from __future__ import annotations

import torch

from tercet.plugin_api import LoraPart, LoraSegment, LoraWeights
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.torch_lora_backend import TorchLoraBackend


def test_it_is_the_registered_torch_backend():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).lora_backends
    assert registry.entries["torch"].plugin_name == "torch_lora_backend"


def test_two_segments_of_a_fused_projection_get_their_own_adapters_deltas():
    torch.manual_seed(0)
    x, base = torch.randn(7, 8), torch.randn(7, 12)
    # Adapter one adapts parts at columns 0 and 8 (ranks 2 and 3); adapter two only the part at column 4.
    a1, b1q, b1v = torch.randn(5, 8), torch.randn(4, 2), torch.randn(4, 3)
    one = LoraWeights(a1, (LoraPart(b1q, 0, 0, 2), LoraPart(b1v, 8, 2, 5)))
    a2, b2k = torch.randn(1, 8), torch.randn(4, 1)
    two = LoraWeights(a2, (LoraPart(b2k, 4, 0, 1),))
    expected = base.clone()
    expected[0:3, 0:4] += x[0:3] @ a1[:2].t() @ b1q.t()
    expected[0:3, 8:12] += x[0:3] @ a1[2:].t() @ b1v.t()
    expected[5:7, 4:8] += x[5:7] @ a2.t() @ b2k.t()
    output = base.clone()
    TorchLoraBackend().add_deltas(output, x, [LoraSegment(0, 3, one), LoraSegment(5, 7, two)])
    torch.testing.assert_close(output, expected)
