"""The engine's thread and its inbox: the one place the engine is driven from."""
