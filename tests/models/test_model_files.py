"""GGUF headers read without the weights, and the library's folders: the bundled model's facts, files
that are broken in every way a download or a disk breaks them (a row with the reason, never an
exception), split models as one, and the other tools' folders (LM Studio, the hub cache, llama.cpp)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from gguf_files import copy_head, write_gguf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.default_model import default_model_path
from app.models.gguf_meta import format_params, read_gguf
from app.models.library import HUGGING_FACE, LLAMA_CPP, LM_STUDIO, ModelFinder, ModelFolder, tool_folders

pytestmark = pytest.mark.unit

SMOLLM_PARAMS = 134_515_008  # counted from its 272 tensors' shapes
HEADER_BYTES = 1_785_664  # where the bundled model's weights start


def test_the_bundled_model_s_facts_come_from_its_header():
    meta = read_gguf(default_model_path())
    assert meta.error == ""
    assert meta.architecture == "llama" and meta.kind == "model"
    assert meta.context_length == 8192  # llama.context_length: SmolLM2's training context
    assert meta.has_chat_template and "<|im_start|>" in meta.metadata["tokenizer.chat_template"]
    assert meta.quantization == "Q4_1"  # general.file_type 3
    assert meta.size_label == "135M" and meta.n_params == SMOLLM_PARAMS and format_params(meta.n_params) == "135M"
    assert meta.size_bytes == os.path.getsize(default_model_path()) and len(meta.tensors) == 272
    assert meta.metadata["tokenizer.ggml.tokens"] == 49152  # an array is kept as its length


def test_a_truncated_copy_says_how_much_is_missing(tmp_path):
    model = default_model_path()
    cut_in_weights = read_gguf(copy_head(model, tmp_path / "half.gguf", 50_000_000))
    assert cut_in_weights.error == "truncated: the file has 50.0 MB of the 98.4 MB its header describes"
    assert cut_in_weights.architecture == "llama"  # the header itself is whole
    cut_in_header = read_gguf(copy_head(model, tmp_path / "head.gguf", 1_000_000))
    assert cut_in_header.error == "truncated: the header ends early (the file has 1,000,000 bytes)"


def test_files_that_are_not_gguf_say_so(tmp_path):
    (tmp_path / "notes.gguf").write_text("hello, this is not a model")
    (tmp_path / "empty.gguf").touch()
    (tmp_path / "folder.gguf").mkdir()
    (tmp_path / "old.gguf").write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(16))
    errors = {name: read_gguf(tmp_path / name).error for name in ("notes.gguf", "empty.gguf", "folder.gguf", "old.gguf")}
    assert errors == {
        "notes.gguf": "not a GGUF file (it starts with 'hell', not 'GGUF')",
        "empty.gguf": "empty file",
        "folder.gguf": "a folder, not a GGUF file",
        "old.gguf": "GGUF version 1 is not supported (2 and 3 are)",
    }
    assert read_gguf(tmp_path / "missing.gguf").error == "cannot read the file: No such file or directory"


@pytest.fixture(scope="module")
def header() -> bytes:
    with open(default_model_path(), "rb") as f:
        return f.read(HEADER_BYTES + 64)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, HEADER_BYTES + 64), flips=st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=8))
@example(cut=HEADER_BYTES + 64, flips=[(16, 0xFF)])  # a huge metadata count
@example(cut=HEADER_BYTES + 64, flips=[(31, 0x7F)])  # the first key's length, 2^63 bytes
def test_no_broken_header_raises(header, cut, flips):
    data = bytearray(header[:cut])
    for at, value in flips:
        if at < len(data):
            data[at] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "broken.gguf"
        path.write_bytes(bytes(data))
        meta = read_gguf(path)
    assert meta.error  # the weights are missing, whatever else is
    assert "\n" not in meta.error


def test_a_split_model_is_one_entry_and_a_missing_part_is_named(tmp_path):
    write_gguf(tmp_path / "tiny.gguf", tensors=5, split_max_tensors=2, context=2048)  # 2 + 2 + 1 tensors
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert parts == [f"tiny-0000{n}-of-00003.gguf" for n in (1, 2, 3)]
    (entry,) = ModelFinder().scan([ModelFolder(str(tmp_path))]).entries
    assert entry.name == "tiny" and entry.loadable and len(entry.parts) == 3
    assert entry.path.endswith("tiny-00001-of-00003.gguf")  # llama.cpp finds the other parts from the first
    assert entry.n_params == 5 * 64 * 32 and entry.params_label == "10K"
    assert entry.size_bytes == sum(p.stat().st_size for p in tmp_path.iterdir())
    assert entry.meta.context_length == 2048 and not entry.meta.has_chat_template  # a base model
    (tmp_path / "tiny-00002-of-00003.gguf").unlink()
    (entry,) = ModelFinder().scan([ModelFolder(str(tmp_path))]).entries
    assert entry.problem == "part 2 of 3 missing" and not entry.loadable


def test_projectors_adapters_and_vocabularies_are_listed_as_what_they_are(tmp_path):
    write_gguf(tmp_path / "mmproj-model-f16.gguf", arch="clip", type="mmproj")
    write_gguf(tmp_path / "lora.gguf", type="adapter")
    write_gguf(tmp_path / "ggml-vocab-llama.gguf", tensors=0)
    write_gguf(tmp_path / "chat.gguf", context=4096, template="{{ messages }}")
    entries = {e.name: e for e in ModelFinder().scan([ModelFolder(str(tmp_path))]).entries}
    assert entries["mmproj-model-f16"].problem == "a vision projector (mmproj) for another model, not a model of its own"
    assert entries["lora"].problem == "a LoRA adapter for another model, not a model of its own"
    assert entries["ggml-vocab-llama"].problem == "a vocabulary only: it has no weights"
    chat = entries["chat"]
    assert chat.loadable and chat.meta.has_chat_template and chat.meta.quantization == "F32"  # no file type: the tensors'


def hub_cache(root: Path, repo: str, files: dict[str, bytes | str], revisions=("main1", "main2")) -> Path:
    """The Hugging Face hub cache's layout: blobs by hash, and snapshots whose files link to them."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True)
    for n, (name, source) in enumerate(files.items()):
        blob = folder / "blobs" / f"{n:064x}"  # a hash, no extension
        if isinstance(source, str):
            os.symlink(source, blob)  # the bundled model, without a copy
        else:
            blob.write_bytes(source)
        for revision in revisions:
            (folder / "snapshots" / revision).mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../blobs/{blob.name}", folder / "snapshots" / revision / name)
    return folder


def test_the_hub_cache_is_listed_by_its_links_names_once_per_file(tmp_path):
    hub, model = tmp_path / "hub", default_model_path()
    hub_cache(hub, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", {"smollm2-135m-instruct-q4_1.gguf": model})
    (entry,) = ModelFinder().scan([ModelFolder(str(hub), HUGGING_FACE)]).entries  # two snapshots, one blob
    assert entry.name == "smollm2-135m-instruct-q4_1" and entry.repo == "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    assert os.path.islink(entry.path) and entry.loadable and entry.meta.architecture == "llama"
    assert entry.size_bytes == os.path.getsize(model)  # the blob's, through the link


def test_other_tools_folders_are_found_where_their_variables_say(tmp_path):
    home = tmp_path / "home"
    for folder in (".lmstudio/models", ".cache/lm-studio/models", ".cache/huggingface/hub", ".cache/llama.cpp"):
        (home / folder).mkdir(parents=True)
    found = tool_folders(env={}, home=str(home), platform="linux")
    assert [(Path(f.path).relative_to(home).as_posix(), f.source) for f in found] == [
        (".lmstudio/models", LM_STUDIO),
        (".cache/lm-studio/models", LM_STUDIO),
        (".cache/huggingface/hub", HUGGING_FACE),
        (".cache/llama.cpp", LLAMA_CPP),
    ]
    for name in ("hf-home/hub", "hub-cache", "llama-cache", "xdg/huggingface/hub"):
        (tmp_path / name).mkdir(parents=True)
    env = {"HF_HOME": str(tmp_path / "hf-home"), "LLAMA_CACHE": str(tmp_path / "llama-cache")}
    assert [f.path for f in tool_folders(env, str(home))][2:] == [str(tmp_path / "hf-home/hub"), str(tmp_path / "llama-cache")]
    env = {"HF_HUB_CACHE": str(tmp_path / "hub-cache"), "HF_HOME": str(tmp_path / "hf-home")}  # the hub cache wins
    assert str(tmp_path / "hub-cache") in [f.path for f in tool_folders(env, str(home))]
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert [f.path for f in tool_folders(env, str(home)) if f.source == HUGGING_FACE] == [str(tmp_path / "xdg/huggingface/hub")]
    assert tool_folders(env={}, home=str(tmp_path / "nobody")) == []  # none exists: none listed


def test_a_rescan_reads_only_what_changed(tmp_path):
    write_gguf(tmp_path / "a.gguf", context=1024)
    finder = ModelFinder()
    first = finder.scan([ModelFolder(str(tmp_path))]).entries[0].meta
    assert finder.scan([ModelFolder(str(tmp_path))]).entries[0].meta is first  # kept: same size and time
    write_gguf(tmp_path / "a.gguf", context=2048, tensors=4)
    assert finder.scan([ModelFolder(str(tmp_path))]).entries[0].meta.context_length == 2048


def test_hidden_folders_are_skipped_and_a_file_may_stand_for_a_folder(tmp_path):
    for folder in (".trash", "deep/er"):
        (tmp_path / folder).mkdir(parents=True)
    write_gguf(tmp_path / ".trash" / "old.gguf")
    write_gguf(tmp_path / "deep" / "er" / "model.gguf")
    assert [e.name for e in ModelFinder().scan([ModelFolder(str(tmp_path))]).entries] == ["model"]
    single = ModelFinder().scan([ModelFolder(str(tmp_path / "deep" / "er" / "model.gguf"), "bundled")]).entries
    assert [(e.name, e.source) for e in single] == [("model", "bundled")]


def test_a_folder_that_is_gone_is_named(tmp_path):
    write_gguf(tmp_path / "a.gguf")
    scan = ModelFinder().scan([ModelFolder(str(tmp_path / "unmounted")), ModelFolder(str(tmp_path))])
    assert scan.missing == (str(tmp_path / "unmounted"),) and [e.name for e in scan.entries] == ["a"]
