"""The OpenAI Responses API: ``POST /v1/responses``, stateless, served over chat completions through
``http.chat``: bodies and options in, output items and stream events out.

May import: ``http.chat``, ``http.openai`` and http's top level, frontend and below.
"""
