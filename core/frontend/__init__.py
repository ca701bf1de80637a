"""The API side of every request, in the main process: the TokenizerManager and its request state,
what the HTTP layer hands it, prompt and embedding batches, tool calls in chat, data-parallel routing.
May import: processes, ipc, tokenizer, tools, metrics and the foundation modules; never http or torch."""
