"""The built-in linear method ``dense``: full-precision weights, registered as any third party would.

This module is imported in every process, so torch is only imported when a
layer is made.
"""

from tercet.plugin_api import hookimpl


def create_dense_method():
    from tercet.plugins.linear_layers.methods import DenseLinearMethod

    return DenseLinearMethod()


@hookimpl
def register_linear_methods(register):
    register("dense", create_dense_method)
