"""OpenAI's API: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models`` and ``/v1/embeddings``;
their bodies in (chat messages, tools, tool choice), their answers and streams out.

May import: http's top level and ``http.control`` (which adapter a request names), frontend and below.
"""
