"""The built-in linear method ``int8``: weight-only int8, a scale per output channel, made at load time.

This module is imported in every process, so torch is only imported when a
layer is made.
"""

from tercet.plugin_api import hookimpl


def create_int8_method():
    from tercet.plugins.linear_layers.methods import Int8LinearMethod

    return Int8LinearMethod()


@hookimpl
def register_linear_methods(register):
    register("int8", create_int8_method)
