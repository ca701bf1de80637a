"""tercet: a plugin-based LLM serving runtime."""

__version__ = "0.1.0"
