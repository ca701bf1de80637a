"""The bridge that serves other chat protocols (the Anthropic Messages API, the OpenAI Responses API)
over chat completions: a body translated into a chat completions body, the chat answer read back as
blocks, the field checks both protocols share, and which of the client's fields a refusal names.

May import: ``http.openai`` (the chat completions it serves them over), ``http.control``,
http's top level, frontend and below.
"""
