"""Reasoning output: the parser contract (a plugin kind), the reader of tagged reasoning,
and the API server's contained reader of the configured parser.
May import: the foundation modules only."""
