"""The KV cache: the manager, its cells and slots, the layouts, the RAM tier and the prefixes known."""
