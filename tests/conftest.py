"""Shared fixtures: the real default model, a tiny model of its kind, and engines driven through the real engine thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# every engine the tests start (servers they spawn too) checks its KV bookkeeping against llama.cpp's after each decode
os.environ.setdefault("BATCH_PLAYGROUND_CHECK_CELLS", "1")

from app.default_model import default_model_path  # noqa: E402
from app.engine.params import EngineConfig  # noqa: E402


@pytest.fixture(scope="session")
def model_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def q8_model_path(model_path, tmp_path_factory) -> str:
    """A second model, made offline: the bundled one re-quantized to Q8_0 (about a second on 2 cores)."""
    from app.engine.llama.quantize import quantize

    path = str(tmp_path_factory.mktemp("models") / "SmolLM2-135M-Instruct.Q8_0.gguf")
    quantize(model_path, path, "q8_0", n_threads=2)
    return path


@pytest.fixture(scope="session")
def tiny_model_path(model_path, tmp_path_factory) -> str:
    """The bundled model's architecture, tokenizer and chat template in two narrow layers of seeded
    random weights (9 MiB, written in about 2 s by scripts/synthetic-gguf): llama.cpp runs it as any
    model, about 15 times faster. For tests of cells, slots, steps and the RAM tier, whose outcome
    does not depend on what a model says; what it writes is noise and it seldom ends a reply itself."""
    return write_tiny_model(model_path, tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def write_tiny_model(like: str, path: Path, *flags: str) -> str:
    """A tiny model of `like`'s kind at `path` (scripts/synthetic-gguf's `flags` beside the shapes)."""
    script = Path(__file__).parent.parent / "scripts" / "synthetic-gguf"
    shapes = ["--layers", "2", "--embd", "128", "--ff", "512", "--heads", "4", "--kv-heads", "2", "--type", "Q8_0"]
    subprocess.run(
        [sys.executable, str(script), "--like", like, "--out", str(path), *shapes, *flags], check=True, capture_output=True
    )
    return str(path)


@pytest.fixture
def config(model_path) -> EngineConfig:
    return EngineConfig(model_path=model_path, n_ctx=4096, n_batch=512, capacity=8, n_threads=2)


@pytest.fixture
def tiny_config(tiny_model_path) -> EngineConfig:
    return EngineConfig(model_path=tiny_model_path, n_ctx=4096, n_batch=512, capacity=8, n_threads=2)


GUI_FIXTURES = {"qtbot", "qapp", "loop", "run_window"}
MODEL_FIXTURES = {"model_path", "q8_model_path", "tiny_model_path", "config", "tiny_config", "shared_engine", "served"}


def pytest_collection_modifyitems(items) -> None:
    """Each test is `gui` (a window), `model` (the real model, no Qt) or `unit` (neither): `-m unit` runs in seconds."""
    for item in items:
        if any(item.get_closest_marker(kind) for kind in ("unit", "model", "gui")):
            continue  # marked by hand: a test that runs the app in a process of its own
        used = set(getattr(item, "fixturenames", ()))
        kind = "gui" if used & GUI_FIXTURES else "model" if used & MODEL_FIXTURES else "unit"
        item.add_marker(kind)


pytest_plugins = ["ui_fixtures"]  # the window's fixtures (a qasync loop on pytest-qt's app, a data folder)
