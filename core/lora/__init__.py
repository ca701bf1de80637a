"""LoRA adapters served over one base model: PEFT files, the layers that add their deltas, the backend contract.

It imports torch, safetensors and the layers below it (errors, the config's
sections, the plugin host); :mod:`tercet.model` builds on it, never the reverse.
"""
