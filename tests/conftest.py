"""Shared fixtures: the real default model, and engines driven through the real engine thread."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.default_model import default_model_path  # noqa: E402
from app.engine.params import EngineConfig  # noqa: E402


@pytest.fixture(scope="session")
def model_path() -> str:
    return default_model_path()


@pytest.fixture
def config(model_path) -> EngineConfig:
    return EngineConfig(model_path=model_path, n_ctx=4096, n_batch=512, capacity=8, n_threads=2)

pytest_plugins = ["ui_fixtures"]  # the window's fixtures (a qasync loop on pytest-qt's app, a data folder)
