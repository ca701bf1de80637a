"""The built-in grammar backend ``llguidance``, registered as any third party would.

This module is imported in every process, so llguidance is only imported
when the scheduler builds the backend.
"""

from tercet.plugin_api import hookimpl


def create_llguidance_backend(tokenizer):
    from tercet.plugins.llguidance_grammar.backend import LlguidanceBackend

    return LlguidanceBackend(tokenizer)


@hookimpl
def register_grammar_backends(register):
    register("llguidance", create_llguidance_backend)
