"""Model files on disk: GGUF headers read without the weights, and the folders a library finds them in."""
