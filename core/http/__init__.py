"""The HTTP front end: OpenAI-compatible and native routes over the TokenizerManager, each body
parsed and checked once here, errors in OpenAI's shape, the OpenAPI document, SSE and the chat page.
May import: frontend and everything below it; never scheduler, model or torch."""
