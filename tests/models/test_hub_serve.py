"""`serve --hf` end to end against the hub stand-in: a vision model's repo pulled with its projector,
served as a model that sees pictures."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.hub_standin import HubStandin, StandinRepo
from tests.spawn import free_port, running, serve_command

pytestmark = pytest.mark.tiny


def test_served_from_the_hub_with_its_projector(tiny_model_path, tiny_mmproj_path, tmp_path, monkeypatch):
    files = {"tiny-Q8_0.gguf": Path(tiny_model_path).read_bytes(), "mmproj-tiny-F16.gguf": Path(tiny_mmproj_path).read_bytes()}
    standin = HubStandin({"ggml-org/tiny-vl-GGUF": StandinRepo(files)})
    monkeypatch.setenv("HF_ENDPOINT", standin.start())
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    try:
        command = serve_command(port, "--hf", "ggml-org/tiny-vl-GGUF", "-c", "512")
        with running(command, port) as url, urllib.request.urlopen(f"{url}/v1/models", timeout=10) as response:
            [model] = json.load(response)["data"]
    finally:
        standin.stop()
    assert model["capabilities"] == ["completion", "multimodal"]
    assert os.path.basename(model["meta"]["projector"]) == "mmproj-tiny-F16.gguf"
    assert "models--ggml-org--tiny-vl-GGUF" in model["meta"]["projector"]
