"""Tool calls: the parser contract (a plugin kind), reading JSON that is still being written,
and a conversation with tools made ready for a chat template.
May import: the foundation modules only."""
