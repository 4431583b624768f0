"""A desktop chat playground: several panes chat at once through one batching llama.cpp engine."""
