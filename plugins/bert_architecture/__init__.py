"""The built-in BERT encoder (all-MiniLM-L6-v2 and other sentence-transformers BERTs), registered
as any third party would. It embeds; it cannot generate.

This module is imported in every process, so the model code (torch) is only
imported when a scheduler builds the model.
"""

from tercet.plugin_api import hookimpl


def create_bert_architecture():
    from tercet.plugins.bert_architecture.architecture import BertArchitecture

    return BertArchitecture()


@hookimpl
def register_model_architectures(register):
    register("BertModel", create_bert_architecture)
