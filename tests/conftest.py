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


@pytest.fixture(scope="session")
def family_models(model_path, tmp_path_factory) -> dict[str, str]:
    """The bundled model carrying each tool-call family's chat template (tool_templates.py), by family:
    its real weights mostly put the token a grammar wants on top, so a constrained draw is cheap
    (random weights often make the grammar check the whole vocabulary). About a second a copy."""
    import tool_templates

    return _with_templates(model_path, tmp_path_factory.mktemp("families"), tool_templates.FAMILIES)


@pytest.fixture(scope="session")
def thinking_models(model_path, tmp_path_factory) -> dict[str, str]:
    """The bundled model carrying each thinking family's chat template (think_templates.py), by family.
    It never learnt to think: a template that opens the thoughts in its generation prompt, with a
    reasoning budget, makes it write thoughts, then the family's closing marker, then an answer."""
    import think_templates

    return _with_templates(model_path, tmp_path_factory.mktemp("thinking"), think_templates.FAMILIES)


@pytest.fixture(scope="session")
def caps_models(model_path, tmp_path_factory) -> dict[str, str]:
    """The bundled model carrying each short template that cannot render part of a chat
    (caps_templates.py): a system message, the arguments as a mapping, `tools`, string content."""
    import caps_templates

    return _with_templates(model_path, tmp_path_factory.mktemp("caps"), caps_templates.FAMILIES)


@pytest.fixture(scope="session")
def marker_models(model_path, tmp_path_factory) -> dict[str, str]:
    """The bundled model with a family's template (tool_templates.py) and its markers as the
    family's vocabulary holds them: some of the bundled model's code-corpus control tokens
    (<repo_name> on) renamed, so that a marker is one token. gpt-oss's Harmony markers (llama.cpp
    then makes all but <|call|> and <|return|> ordinary tokens, as it does for gpt-oss) and
    Ministral's [TOOL_CALLS] and [ARGS] (control tokens, which a grammar must draw as tokens)."""
    import tool_templates
    from gguf_files import with_tokens_renamed

    families = {
        "gpt_oss": (
            tool_templates.GPT_OSS,
            ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"),
        ),
        "ministral": (tool_templates.MINISTRAL_3, ("[TOOL_CALLS]", "[ARGS]")),
    }
    folder = tmp_path_factory.mktemp("markers")
    return {
        family: with_tokens_renamed(model_path, folder / f"{family}.gguf", dict(enumerate(markers, start=3)), template)
        for family, (template, markers) in families.items()
    }


def _with_templates(model_path: str, folder: Path, templates: dict[str, str]) -> dict[str, str]:
    for family, template in templates.items():
        out = folder / f"{family}.gguf"
        subprocess.run(
            [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", model_path, str(out), "--chat-template", template],
            check=True,
            capture_output=True,
        )
    return {family: str(folder / f"{family}.gguf") for family in templates}


def write_tiny_model(like: str, path: Path, *flags: str) -> str:
    """A tiny model of `like`'s kind at `path` (scripts/synthetic-gguf's `flags` beside the shapes)."""
    script = Path(__file__).parent.parent / "scripts" / "synthetic-gguf"
    shapes = ["--layers", "2", "--embd", "128", "--ff", "512", "--heads", "4", "--kv-heads", "2", "--type", "Q8_0"]
    subprocess.run(
        [sys.executable, str(script), "--like", like, "--out", str(path), *shapes, *flags], check=True, capture_output=True
    )
    return str(path)


@pytest.fixture(scope="session")
def mmproj_path(model_path, tmp_path_factory) -> str:
    """A vision projector for the bundled model: LLaVA's kind, random weights (scripts/synthetic-mmproj),
    16 tokens a picture, decoded causally beside the step's tokens."""
    return write_projector(model_path, tmp_path_factory.mktemp("mmproj") / "mmproj-SmolLM2-F16.gguf")


@pytest.fixture(scope="session")
def tiny_mmproj_path(tiny_model_path, tmp_path_factory) -> str:
    """The same for the tiny model (its embedding size)."""
    return write_projector(tiny_model_path, tmp_path_factory.mktemp("mmproj") / "mmproj-tiny-F16.gguf")


@pytest.fixture(scope="session")
def qwen_vl_paths(model_path, tmp_path_factory) -> tuple[str, str]:
    """A tiny Qwen2-VL: the tiny model's shapes as a qwen2vl text model (its positions in 2D, M-RoPE)
    and a qwen2vl_merger projector of random weights for it (4-pixel patches, 2x2 merged: a token
    per 8x8 pixels, at least 8 a picture; a 24x16 picture is 4x3 tokens over 4 positions); (model, projector)."""
    folder = tmp_path_factory.mktemp("qwen_vl")
    model = write_tiny_model(model_path, folder / "qwen2vl-tiny.gguf", "--arch", "qwen2vl")
    shapes = ("--patch-size", "4", "--image-size", "32", "--embd", "32", "--heads", "2", "--ff", "64")
    return model, write_projector(model, folder / "mmproj-qwen2vl-tiny-F16.gguf", "--type", "qwen2vl", *shapes)


def write_projector(model: str, path: Path, *flags: str) -> str:
    """A projector with random weights whose output fits `model` (scripts/synthetic-mmproj's `flags`)."""
    script = Path(__file__).parent.parent / "scripts" / "synthetic-mmproj"
    subprocess.run([sys.executable, str(script), model, str(path), *flags], check=True, capture_output=True)
    return str(path)


@pytest.fixture
def config(model_path) -> EngineConfig:
    return EngineConfig(model_path=model_path, n_ctx=4096, n_batch=512, capacity=8, n_threads=2)


@pytest.fixture
def tiny_config(tiny_model_path) -> EngineConfig:
    return EngineConfig(model_path=tiny_model_path, n_ctx=4096, n_batch=512, capacity=8, n_threads=2)


# what a test needs, lightest first: each test file says it (`pytestmark`, or a mark on each test
# where its tests differ), so `scripts/test -m "unit or tiny"` picks the quick ones by name
KINDS = ("unit", "tiny", "model", "gui")
GUI_FIXTURES = {"qtbot", "qapp", "loop", "run_window", "run_tiny_window"}
MODEL_FIXTURES = {
    "model_path",
    "q8_model_path",
    "tiny_model_path",
    "config",
    "tiny_config",
    "shared_engine",
    "served",
    "family_models",
    "thinking_models",
    "mmproj_path",
    "tiny_mmproj_path",
    "qwen_vl_paths",
    "caps_models",
}


def pytest_collection_modifyitems(items) -> None:
    """Refuse a test that says no kind, two, or less than its fixtures need (a window is `gui`; any model
    at least `tiny`): a mark that lies would put a slow test in the quick set."""
    for item in items:
        kinds = [mark.name for mark in item.iter_markers() if mark.name in KINDS]
        used = set(getattr(item, "fixturenames", ()))
        needed = "gui" if used & GUI_FIXTURES else "tiny" if used & MODEL_FIXTURES else "unit"
        if len(kinds) != 1:
            raise pytest.UsageError(f"{item.nodeid}: mark it with one of {', '.join(KINDS)} (found {kinds or 'none'})")
        if KINDS.index(kinds[0]) < KINDS.index(needed):
            raise pytest.UsageError(f"{item.nodeid} is marked {kinds[0]} but its fixtures need {needed}")


pytest_plugins = ["ui_fixtures"]  # the window's fixtures (a qasync loop on pytest-qt's app, a data folder)
