"""A model's vision projector (--mmproj): loaded beside it through llama.cpp's mtmd, found beside it by
its name, refused with a reason when it does not fit; ModelInfo says whether the model sees images."""

from __future__ import annotations

import os

import pytest
from conftest import write_projector

from app.cli import build_parser, engine_overrides
from app.engine.errors import ModelLoadError
from app.engine.llama.context import LlamaBackend
from app.engine.model_file import find_projector
from app.engine.params import MMPROJ_NONE, EngineConfig


def _backend(model: str, **settings) -> LlamaBackend:
    return LlamaBackend(EngineConfig(model, n_ctx=512, capacity=2, n_threads=2, **settings))


def _beside(tmp_path, model: str, *names: str) -> str:
    """The model linked into a folder of its own, with these files beside it."""
    linked = tmp_path / os.path.basename(model)
    linked.symlink_to(model)
    for name in names:
        (tmp_path / name).write_bytes(b"GGUF")
    return str(linked)


@pytest.mark.tiny
def test_a_projector_given_lets_the_model_see_images(tiny_model_path, tiny_mmproj_path):
    backend = _backend(tiny_model_path, mmproj=tiny_mmproj_path)
    try:
        info = backend.info
        assert info.sees_images and info.projector == tiny_mmproj_path
        assert "beside the step's tokens" in info.image_decode  # LLaVA's kind: causal
        assert info.as_json()["projector"] == tiny_mmproj_path
        assert not backend.vision.non_causal and backend.vision.n_embd == 128
    finally:
        backend.close()
    assert backend.vision is None  # freed with the model


@pytest.mark.tiny
def test_without_a_projector_the_model_sees_no_images(tiny_model_path):
    backend = _backend(tiny_model_path)
    try:
        assert not backend.info.sees_images and backend.info.projector == "" and backend.image_batch is None
    finally:
        backend.close()


@pytest.mark.tiny
def test_a_projector_beside_the_model_is_found_by_its_name(tmp_path, tiny_model_path):
    model = _beside(tmp_path, tiny_model_path)
    write_projector(tiny_model_path, tmp_path / "mmproj-tiny-F16.gguf")
    backend = _backend(model)
    try:
        assert backend.info.projector == str(tmp_path / "mmproj-tiny-F16.gguf")
    finally:
        backend.close()
    off = _backend(model, mmproj=MMPROJ_NONE)  # none: not even the one beside it
    try:
        assert not off.info.sees_images
    finally:
        off.close()


@pytest.mark.tiny
def test_a_projector_of_another_size_given_is_refused_with_why(tiny_model_path, mmproj_path):
    with pytest.raises(ModelLoadError, match="projector") as caught:
        _backend(tiny_model_path, mmproj=mmproj_path)  # made for the bundled model: 576 wide, not 128
    assert "mismatch" in str(caught.value) or "n_embd" in str(caught.value)


@pytest.mark.tiny
def test_a_projector_of_another_size_found_beside_is_a_notice(tmp_path, tiny_model_path, mmproj_path):
    model = _beside(tmp_path, tiny_model_path)
    os.symlink(mmproj_path, tmp_path / "mmproj-other.gguf")
    backend = _backend(model)
    try:
        assert not backend.info.sees_images
        assert any("images are off" in n and "mmproj-other.gguf" in n for n in backend.info.notices)
    finally:
        backend.close()


@pytest.mark.tiny
def test_a_missing_or_broken_projector_given_is_refused(tmp_path, tiny_model_path):
    with pytest.raises(ModelLoadError, match="the projector .*not found"):
        _backend(tiny_model_path, mmproj=str(tmp_path / "nothere.gguf"))
    with pytest.raises(ModelLoadError, match="cannot load the projector"):
        _backend(tiny_model_path, mmproj=tiny_model_path)  # a model, not a projector


@pytest.mark.tiny
def test_a_projector_of_gemma_3s_kind_decodes_each_picture_whole(tmp_path, tiny_model_path):
    path = write_projector(tiny_model_path, tmp_path / "mmproj-g3.gguf", "--type", "gemma3", "--image-size", "112")
    backend = _backend(tiny_model_path, mmproj=path)
    try:
        assert backend.vision.non_causal and backend.vision.max_tokens == 16  # (112 / 14 / 2)^2
        assert "decode of its own" in backend.info.image_decode
    finally:
        backend.close()


@pytest.mark.tiny
def test_a_projector_of_qwen_vls_kind_loads_and_places_pictures_in_2d(qwen_vl_paths):
    model, mmproj = qwen_vl_paths
    backend = _backend(model, mmproj=mmproj)
    try:
        assert backend.info.sees_images and backend.vision.mrope and not backend.vision.non_causal
        assert backend.image_batch.pos.shape[0] == 4  # time, row, column, last: llama.cpp's M-RoPE sections
        assert "placed in 2D (M-RoPE)" in backend.info.image_decode
    finally:
        backend.close()


@pytest.mark.unit
def test_the_projector_beside_is_chosen_by_name(tmp_path):
    model = _beside(tmp_path, "/models/gemma-3-4b-it-Q4_K_M.gguf", "mmproj-model-f16.gguf", "mmproj-model-Q8_0.gguf")
    assert find_projector(model) == str(tmp_path / "mmproj-model-f16.gguf")  # F16, llama.cpp's usual pick
    (tmp_path / "mmproj-gemma-3-4b-it-Q8_0.gguf").write_bytes(b"GGUF")
    assert find_projector(model) == str(tmp_path / "mmproj-gemma-3-4b-it-Q8_0.gguf")  # the model's own name first
    assert find_projector(str(tmp_path / "nowhere" / "m.gguf")) is None
    assert find_projector(_beside(tmp_path / "x" if (tmp_path / "x").mkdir() is None else tmp_path, "/m/a.gguf")) is None


@pytest.mark.unit
def test_a_projector_named_is_the_first_models_only():
    args = build_parser().parse_args(["serve", "--mmproj", "/p/mmproj-a.gguf"])
    config = EngineConfig("/m/a.gguf").with_(**engine_overrides(args))
    assert config.mmproj == "/p/mmproj-a.gguf"
    assert config.for_other_model("/m/b.gguf").mmproj is None  # b finds its own
    assert config.with_(mmproj=MMPROJ_NONE).for_other_model("/m/b.gguf").mmproj == MMPROJ_NONE
