"""The Anthropic Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``, served over
chat completions through ``http.chat``: bodies and tools in, messages, stream events and errors out.

May import: ``http.chat``, ``http.openai`` and http's top level, frontend and below.
"""
