"""Errors the engine reports with a reason a person can act on."""


class EngineError(Exception):
    """Base of the engine's errors."""


class ModelLoadError(EngineError):
    """The model file is missing, not a GGUF file, or llama.cpp could not load it."""


class RequestError(EngineError):
    """One request cannot be served (for example its prompt is longer than the context)."""


class UnknownModelError(EngineError):
    """No loaded model has that name."""
