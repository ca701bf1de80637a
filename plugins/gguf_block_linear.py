"""The built-in linear methods ``q4_0``, ``q4_1`` and ``q8_0``: GGUF's block formats, run from their codes.

A GGUF tensor already in the format is used as shipped; any other tensor
is quantized to it at load time. This module is imported in every process,
so torch is only imported when a layer is made.
"""

from functools import partial

from tercet.plugin_api import hookimpl

BLOCK_TYPES = ("Q4_0", "Q4_1", "Q8_0")


def create_block_method(type_name: str):
    from tercet.plugins.linear_layers.methods import BlockLinearMethod

    return BlockLinearMethod(type_name)


@hookimpl
def register_linear_methods(register):
    for type_name in BLOCK_TYPES:
        register(type_name.lower(), partial(create_block_method, type_name))
