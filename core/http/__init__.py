"""The HTTP front end: OpenAI-compatible and native routes over the TokenizerManager."""
