"""The batching engine: llama.cpp on one thread, no Qt."""
