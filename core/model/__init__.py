"""The lean model side: the paged KV cache, forward batches, the Llama decoder, sampling, and the
contracts of the attention backends, linear methods and architectures that plugins implement.
May import: formats, ipc (messages), config and the foundation modules; never processes or plugin_host."""
