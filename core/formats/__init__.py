"""Model files on disk: GGUF (file, blocks, llama metadata), checkpoints (HF folders or GGUF), weight
formats, a folder's pooling (sentence-transformers), and where the built-in models' files are.
May import: the foundation modules only, so that both model/ and tokenizer/ build on it."""
