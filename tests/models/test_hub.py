"""app/models/hub.py against a stand-in of the hub's HTTP API, with the real huggingface_hub client:
search, a repo's quants and llama.cpp's choice among them, pulls (split, resumed, cached), and what a
hostile or failing hub gets: a refusal in one line."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.cli import _resolve_hf, build_parser
from app.models import hub
from app.models.hub import HubError, HubModel, check_repo_path, choose_model, group_models, quant_of
from app.models.library import choose_projector, find_projector, gguf_files
from tests import hub_standin
from tests.hub_standin import HubStandin, StandinRepo

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]

GGUF = b"GGUF" + (bytes(range(256)) * 64)[4:]  # not a model: the hub serves bytes; 16 KiB, halves whole KiBs
PROJ = b"GGUF" + (bytes(range(255, -1, -1)) * 32)[4:]  # a projector's bytes (8 KiB): a blob of its own


def _part(n: int) -> bytes:
    return GGUF + bytes([n]) * 100


def _downloads(standin, file: str = "") -> list[tuple[str, str, str]]:
    """The GETs of files (of `file` alone, where named): (method, path, Range)."""
    return [r for r in standin.requests if r[0] == "GET" and "/resolve/" in r[1] and (not file or r[1].endswith("/" + file))]


def _quick_retries(monkeypatch) -> None:
    """huggingface_hub's retries without their second of sleep, its writes in small chunks (a chunk cut
    short by a dropped connection is lost, so 10 MiB ones would leave nothing to resume from)."""
    from huggingface_hub import constants, file_download

    monkeypatch.setattr(file_download, "time", SimpleNamespace(sleep=lambda s: None, time=time.time))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)


@pytest.fixture
def standin(tmp_path, monkeypatch):
    repos = {
        "bartowski/Tiny-GGUF": StandinRepo(
            {
                "README.md": b"hi",
                "Tiny-Q8_0.gguf": GGUF * 2,
                "Tiny-Q4_K_M.gguf": GGUF,
                "Tiny-IQ2_XS.gguf": GGUF[:100],
                "mmproj-Tiny-f16.gguf": PROJ,
            },
            downloads=900,
            likes=7,
        ),
        "someone/Tiny-split-GGUF": StandinRepo(
            {f"Q8_0/Tiny-Q8_0-0000{i}-of-00003.gguf": _part(i) for i in (1, 2, 3)}, downloads=5
        ),
        "meta/Gated-GGUF": StandinRepo({"Gated-Q4_K_M.gguf": GGUF}, downloads=50, gated=True),
        "evil/Hostile-GGUF": StandinRepo({"../../escape-Q4_K_M.gguf": GGUF}),
        "evil/Huge-GGUF": StandinRepo({"Huge-Q4_K_M.gguf": GGUF}, claimed_sizes={"Huge-Q4_K_M.gguf": 2**62}),
        "nobody/Empty-GGUF": StandinRepo({"README.md": b"no model"}),
        "ggml/Vision-GGUF": StandinRepo(
            {
                "Vision-Q4_K_M.gguf": GGUF,
                "Vision-Q8_0.gguf": GGUF * 2,
                "mmproj-Vision-F32.gguf": PROJ * 2,
                "mmproj-Vision-BF16.gguf": PROJ + b"b",
                "mmproj-Vision-F16.gguf": PROJ,
                "MMPROJ-Vision-Q8_0.GGUF": PROJ[:4096],
            }
        ),
        "unsloth/Big-VL-GGUF": StandinRepo(
            {
                **{f"Q8_0/Big-VL-Q8_0-0000{i}-of-00002.gguf": _part(i) for i in (1, 2)},
                "mmproj-F32.gguf": PROJ * 2,
                "mmproj-F16.gguf": PROJ,
                "extras/mmproj-F16.gguf": PROJ + b"x",  # beside no model: never one's
            }
        ),
        "evil/Huge-projector-GGUF": StandinRepo(
            {"Small-Q4_K_M.gguf": GGUF, "mmproj-Small-f16.gguf": PROJ}, claimed_sizes={"mmproj-Small-f16.gguf": 2**62}
        ),
    }
    server = HubStandin(repos)
    endpoint = server.start()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    yield server
    server.stop()


def test_quant_of_reads_llama_cpp_names():
    assert quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("smollm2-135m-instruct-q8_0.gguf") == "Q8_0"
    assert quant_of("Qwen3-8B-UD-Q4_K_XL.gguf") == "Q4_K_XL"
    assert quant_of("model.IQ4_XS.gguf") == "IQ4_XS"
    assert quant_of("sub/big-model-F16-00002-of-00004.gguf") == "F16"
    assert quant_of("model-bf16.gguf") == "BF16"
    assert quant_of("model.gguf") == ""


def test_choice_is_llama_cpps():
    models = group_models([("a-Q8_0.gguf", 300), ("a-Q4_K_M.gguf", 200), ("a-IQ2_XS.gguf", 100)])
    assert choose_model(models, "").quant == "Q4_K_M"
    assert choose_model(models, "q8_0").name == "a-Q8_0.gguf"  # any case
    assert choose_model(group_models([("a-Q8_0.gguf", 3), ("a-Q6_K.gguf", 2)]), "").quant == "Q6_K"  # the preference list
    assert choose_model(group_models([("a-F16.gguf", 3), ("a-IQ2_XS.gguf", 2)]), "").quant == "IQ2_XS"  # the smallest
    with pytest.raises(HubError, match="no Q5_K_M file in r; it has: IQ2_XS, Q4_K_M, Q8_0"):
        choose_model(models, "Q5_K_M", "r")
    with pytest.raises(HubError, match="no GGUF file in r"):
        choose_model([], "", "r")


def test_split_parts_are_one_model():
    models = group_models([(f"x/m-Q8_0-0000{i}-of-00002.gguf", 10) for i in (2, 1)] + [("mmproj-m-F16.gguf", 5)])
    assert models == [HubModel(("x/m-Q8_0-00001-of-00002.gguf", "x/m-Q8_0-00002-of-00002.gguf"), 20, "Q8_0")]


@pytest.mark.parametrize(
    "name", ["../x.gguf", "a/../../x.gguf", "/etc/x.gguf", "C:/x.gguf", "\\\\server\\x.gguf", "a\0b.gguf", "a//b.gguf",
             "x" * 300 + ".gguf", "a\nb.gguf"]
)  # fmt: skip
def test_hostile_names_are_refused(name):
    with pytest.raises(HubError, match="refusing the hub's file name"):
        check_repo_path(name)


def test_ordinary_names_pass():
    for name in ("Tiny-Q4_K_M.gguf", "Q8_0/Tiny-Q8_0-00001-of-00003.gguf", "a b (1).gguf"):
        check_repo_path(name)


def test_search(standin):
    hits = hub.search("tiny")
    assert [h.repo_id for h in hits] == ["bartowski/Tiny-GGUF", "someone/Tiny-split-GGUF"]
    assert (hits[0].downloads, hits[0].likes, hits[0].last_modified.year) == (900, 7, 2025)


def test_list_models_with_quants_and_sizes(standin):
    models = hub.list_models("bartowski/Tiny-GGUF")
    assert [(m.name, m.quant, m.size) for m in models] == [
        ("Tiny-IQ2_XS.gguf", "IQ2_XS", 100),
        ("Tiny-Q4_K_M.gguf", "Q4_K_M", len(GGUF)),
        ("Tiny-Q8_0.gguf", "Q8_0", 2 * len(GGUF)),
    ]


def test_pull_default_and_named_quant(standin, tmp_path):
    path = hub.pull("bartowski/Tiny-GGUF")
    assert Path(path).read_bytes() == GGUF and path.endswith("Tiny-Q4_K_M.gguf")
    assert str(tmp_path / "hf" / "hub") in path
    assert Path(hub.pull("bartowski/Tiny-GGUF:q8_0")).read_bytes() == GGUF * 2
    fetched = len(_downloads(standin))
    hub.pull("bartowski/Tiny-GGUF:Q8_0")  # cached: not fetched again
    assert len(_downloads(standin)) == fetched
    with pytest.raises(HubError, match="no Q5_K_M file in bartowski/Tiny-GGUF; it has: IQ2_XS, Q4_K_M, Q8_0"):
        hub.pull("bartowski/Tiny-GGUF:Q5_K_M")


def test_pull_split_fetches_every_part(standin):
    path = hub.pull("someone/Tiny-split-GGUF:Q8_0")
    assert path.endswith("Q8_0/Tiny-Q8_0-00001-of-00003.gguf")
    folder = Path(path).parent
    assert [(folder / f"Tiny-Q8_0-0000{i}-of-00003.gguf").read_bytes() for i in (1, 2, 3)] == [_part(i) for i in (1, 2, 3)]


def test_dropped_connection_resumes(standin, monkeypatch):
    _quick_retries(monkeypatch)
    standin.drop_first_get = True
    path = hub.pull("bartowski/Tiny-GGUF:Q4_K_M")
    assert Path(path).read_bytes() == GGUF
    assert [r[2] for r in _downloads(standin, "Tiny-Q4_K_M.gguf")] == ["", f"bytes={len(GGUF) // 2}-"]


def test_interrupted_pull_is_one_line_and_resumes_on_the_next(standin, tmp_path, monkeypatch):
    """A run that fails keeps its partial blob, which no scan takes for a model; the next run asks only
    for the rest."""
    _quick_retries(monkeypatch)
    standin.drop_first_get = standin.drop_resumes = True
    with pytest.raises(HubError, match="interrupted .* run the same command again"):
        hub.pull("bartowski/Tiny-GGUF:Q8_0")
    hub_dir = tmp_path / "hf" / "hub"
    [partial] = (hub_dir / "models--bartowski--Tiny-GGUF" / "blobs").glob("*.incomplete")
    assert partial.stat().st_size == len(GGUF)  # half of GGUF * 2
    assert gguf_files(str(hub_dir)) == ([], False)
    standin.drop_resumes = False
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q8_0")).read_bytes() == GGUF * 2
    assert _downloads(standin, "Tiny-Q8_0.gguf")[-1][2] == f"bytes={len(GGUF)}-"
    assert not partial.exists()


def test_damaged_download_is_refused(standin, tmp_path):
    data = GGUF * 2
    blobs = tmp_path / "hf" / "hub" / "models--bartowski--Tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / (hashlib.sha256(data).hexdigest() + ".incomplete")
    partial.write_bytes(b"X" * len(GGUF))  # not the file's first half
    with pytest.raises(HubError, match="Tiny-Q8_0.gguf arrived damaged .*sha256.* run the same command again"):
        hub.pull("bartowski/Tiny-GGUF:Q8_0")
    assert not partial.exists() and not list(blobs.iterdir())
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q8_0")).read_bytes() == data


def _partial_blob(tmp_path, data: bytes, content: bytes) -> Path:
    """An .incomplete blob of `data` as an earlier run left it, holding `content`."""
    blobs = tmp_path / "hf" / "hub" / "models--bartowski--Tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / (hashlib.sha256(data).hexdigest() + ".incomplete")
    partial.write_bytes(content)
    return partial


def test_partial_longer_than_the_file_is_fetched_anew_in_one_run(standin, tmp_path):
    """A partial blob longer than the file (a run that appended a whole answer to a Range) starts over
    from byte 0, never with a Range past the end."""
    data = GGUF * 2
    partial = _partial_blob(tmp_path, data, data + b"X" * 100)
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q8_0")).read_bytes() == data
    assert [r[2] for r in _downloads(standin, "Tiny-Q8_0.gguf")] == [""]
    assert not partial.exists()


@pytest.mark.parametrize("had", [len(GGUF), 2 * len(GGUF)], ids=["half", "all but verified"])
def test_range_answered_with_the_whole_file_ends_whole(standin, tmp_path, had):
    """A server that answers a Range with 200 and the whole file: what was there is replaced, not
    appended to, and the file is whole and checked in the same run."""
    standin.ignore_ranges = True
    data = GGUF * 2
    _partial_blob(tmp_path, data, data[: had - 1])
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q8_0")).read_bytes() == data
    assert [r[2] for r in _downloads(standin, "Tiny-Q8_0.gguf")] == [f"bytes={had - 1}-"]


def test_dropped_connection_resumed_with_the_whole_file(standin, monkeypatch):
    _quick_retries(monkeypatch)
    standin.drop_first_get = standin.ignore_ranges = True
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q4_K_M")).read_bytes() == GGUF
    assert [r[2] for r in _downloads(standin, "Tiny-Q4_K_M.gguf")] == ["", f"bytes={len(GGUF) // 2}-"]


def test_killed_pull_resumes_in_the_next_run(standin, tmp_path, monkeypatch):
    """`models pull` killed (SIGKILL) halfway through a file leaves what it wrote as an .incomplete blob,
    never a model; the next run asks for the rest with a Range and ends with the hub's checksum."""
    data = hashlib.sha256(b"0").digest() * (24 * 2**20 // 32)  # 24 MiB: huggingface_hub writes 10 MiB at a time
    standin.repos["big/Slow-GGUF"] = StandinRepo({"Slow-Q4_K_M.gguf": data})
    half_sent, release = threading.Event(), threading.Event()
    send = hub_standin._send

    def stall_halfway(h, status, body, *args, **kwargs):
        if len(body) != len(data):
            return send(h, status, body, *args, **kwargs)
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[: len(body) // 2])
        h.wfile.flush()
        half_sent.set()
        release.wait(60)
        h.close_connection = True

    monkeypatch.setattr(hub_standin, "_send", stall_halfway)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    first = subprocess.Popen([sys.executable, "-m", "app", "models", "pull", "big/Slow-GGUF"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    hub_dir = tmp_path / "hf" / "hub"
    partial = hub_dir / "models--big--Slow-GGUF" / "blobs" / (hashlib.sha256(data).hexdigest() + ".incomplete")
    try:
        assert half_sent.wait(60)
        deadline = time.monotonic() + 30
        while not (partial.exists() and partial.stat().st_size >= 10 * 2**20) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        release.set()
    had = partial.stat().st_size
    assert 0 < had < len(data)
    assert gguf_files(str(hub_dir)) == ([], False)  # the partial blob is no model
    monkeypatch.setattr(hub_standin, "_send", send)
    second = _cli("models", "pull", "big/Slow-GGUF", env=env)
    assert second.returncode == 0, second.stderr
    assert _downloads(standin)[-1] == ("GET", "/big/Slow-GGUF/resolve/main/Slow-Q4_K_M.gguf", f"bytes={had}-")
    path = Path(second.stdout.strip())
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert gguf_files(str(hub_dir))[0] == [str(path)]


def test_unknown_repo(standin):
    with pytest.raises(HubError, match="^no repo nobody/Missing on the hub"):
        hub.pull("nobody/Missing")


def test_gated_repo_says_how_to_get_in(standin):
    with pytest.raises(HubError, match=r"meta/Gated-GGUF is gated: accept its licence at http://127.*/meta/Gated-GGUF.*HF_TOKEN"):
        hub.pull("meta/Gated-GGUF")


def test_repo_without_gguf(standin):
    with pytest.raises(HubError, match="no GGUF file in nobody/Empty-GGUF"):
        hub.pull("nobody/Empty-GGUF")


def test_hostile_file_name_refused_before_download(standin, tmp_path):
    with pytest.raises(HubError, match="refusing the hub's file name '../../escape-Q4_K_M.gguf'"):
        hub.pull("evil/Hostile-GGUF")
    assert not any("/resolve/" in r[1] for r in standin.requests)
    assert not list(tmp_path.rglob("escape*"))


def test_file_beyond_free_disk_refused_before_download(standin):
    with pytest.raises(HubError, match=r"Huge-Q4_K_M.gguf needs \d+\.\d\d GiB, and .* has .* GiB free"):
        hub.pull("evil/Huge-GGUF")
    assert not _downloads(standin)


def test_no_network(monkeypatch, tmp_path):
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", SimpleNamespace(sleep=lambda s: None, time=time.time))  # its 5 retries
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard: nothing listens
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(HubError, match="cannot reach the hub at http://127.0.0.1:9"):
        hub.search("x")


def test_offline_uses_the_cache(standin, monkeypatch):
    path = hub.pull("bartowski/Tiny-GGUF")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = len(standin.requests)
    assert hub.pull("bartowski/Tiny-GGUF:Q4_K_M") == path
    assert len(standin.requests) == seen
    with pytest.raises(HubError, match="not in the cache and HF_HUB_OFFLINE is set"):
        hub.pull("someone/Tiny-split-GGUF")


def test_projector_choice():
    """Of a repo's projectors: those nearest the model's folder, then the name most like the model's,
    then the model's quant, then F16, BF16, Q8_0, F32, then the smallest."""
    many = [("mmproj-m-F32.gguf", 4), ("mmproj-m-Q8_0.gguf", 2), ("mmproj-m-BF16.gguf", 3), ("mmproj-m-F16.gguf", 3)]
    assert choose_projector("m-Q4_K_M.gguf", many) == "mmproj-m-F16.gguf"
    assert choose_projector("m-Q8_0.gguf", many) == "mmproj-m-Q8_0.gguf"  # the model's own quant
    assert choose_projector("m-BF16.gguf", many) == "mmproj-m-BF16.gguf"
    assert choose_projector("m-Q4_K_M.gguf", many[:3]) == "mmproj-m-BF16.gguf"
    assert choose_projector("m-Q4_K_M.gguf", [("mmproj-m-Q6_K.gguf", 9), ("mmproj-m-Q4_0.gguf", 5)]) == "mmproj-m-Q4_0.gguf"
    two = [("mmproj-gemma-3-4b-it-f16.gguf", 1), ("mmproj-gemma-3-12b-it-q8_0.gguf", 1)]
    assert choose_projector("gemma-3-12b-it-Q8_0.gguf", two) == "mmproj-gemma-3-12b-it-q8_0.gguf"  # its name first
    assert choose_projector("gemma-3-12b-it-Q4_K_M.gguf", two) == "mmproj-gemma-3-12b-it-q8_0.gguf"
    near = [("mmproj-F16.gguf", 1), ("Q8_0/mmproj-Q8_0.gguf", 1), ("BF16/mmproj-BF16.gguf", 1)]
    assert choose_projector("Q8_0/m-Q8_0-00001-of-00002.gguf", near) == "Q8_0/mmproj-Q8_0.gguf"  # its own folder
    assert choose_projector("Q4_K_M/sub/m-Q4_K_M.gguf", near) == "mmproj-F16.gguf"  # the nearest above it
    assert choose_projector("m.gguf", near[1:]) is None  # in other folders: not the model's
    assert choose_projector("m.gguf", []) is None


def test_pull_fetches_the_projector_beside_the_model(standin):
    lines, seen = [], []
    path = hub.pull("bartowski/Tiny-GGUF", progress=lines.append, on_bytes=lambda done, total: seen.append((done, total)))
    projector = Path(path).with_name("mmproj-Tiny-f16.gguf")
    assert projector.read_bytes() == PROJ and Path(path).read_bytes() == GGUF
    assert find_projector(path) == str(projector)  # where the engine and the library look: beside it
    assert lines == ["bartowski/Tiny-GGUF: Tiny-Q4_K_M.gguf (Q4_K_M, 0.0 MiB) + projector mmproj-Tiny-f16.gguf, 0.0 MiB"]
    assert seen[-1] == (len(GGUF) + len(PROJ), len(GGUF) + len(PROJ))  # its bytes counted in the progress
    assert all(total == len(GGUF) + len(PROJ) for _, total in seen)
    fetched = len(_downloads(standin))
    hub.pull("bartowski/Tiny-GGUF:Q4_K_M")  # both cached: nothing fetched
    assert len(_downloads(standin)) == fetched


def test_pull_without_the_projector(standin):
    path = hub.pull("bartowski/Tiny-GGUF:Q8_0", projector=False)
    assert not _downloads(standin, "mmproj-Tiny-f16.gguf") and find_projector(path) is None


def test_projector_of_the_models_quant(standin):
    """Several projectors: the one of the model's quant, else F16; each pull puts its own beside it."""
    q4 = hub.pull("ggml/Vision-GGUF")
    assert [r[1].rsplit("/", 1)[1] for r in _downloads(standin)] == ["Vision-Q4_K_M.gguf", "mmproj-Vision-F16.gguf"]
    q8 = hub.pull("ggml/Vision-GGUF:Q8_0")
    assert _downloads(standin)[-1][1].endswith("/MMPROJ-Vision-Q8_0.GGUF")  # any case
    assert Path(q8).with_name("MMPROJ-Vision-Q8_0.GGUF").read_bytes() == PROJ[:4096]
    assert find_projector(q8) == str(Path(q8).with_name("MMPROJ-Vision-Q8_0.GGUF"))  # the one pulled with it
    assert find_projector(q4) == str(Path(q4).with_name("mmproj-Vision-F16.gguf"))


def test_projector_above_a_model_in_a_folder(standin):
    """A repo with its quants in folders and its projectors at its root: the root's F16 is fetched,
    and found from the model's folder within the cache's snapshot."""
    path = hub.pull("unsloth/Big-VL-GGUF")
    snapshot = Path(path).parents[1]
    assert path.endswith("Q8_0/Big-VL-Q8_0-00001-of-00002.gguf") and snapshot.parent.name == "snapshots"
    assert find_projector(path) == str(snapshot / "mmproj-F16.gguf")
    assert (snapshot / "mmproj-F16.gguf").read_bytes() == PROJ
    assert not (snapshot / "extras").exists() and not (snapshot / "mmproj-F32.gguf").exists()


def test_projector_above_is_found_only_in_a_hub_snapshot(tmp_path):
    """Elsewhere a projector is the model's only beside it: one a folder up may be another model's."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "mmproj-F16.gguf").write_bytes(PROJ)
    (tmp_path / "sub" / "m-Q4_K_M.gguf").write_bytes(GGUF)
    assert find_projector(str(tmp_path / "sub" / "m-Q4_K_M.gguf")) is None


def test_a_repo_without_a_projector_pulls_as_before(standin):
    lines = []
    path = hub.pull("someone/Tiny-split-GGUF", progress=lines.append)
    assert [r[1].rsplit("/", 1)[1] for r in _downloads(standin)] == [f"Tiny-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert "projector" not in lines[0] and find_projector(path) is None


def test_offline_finds_the_model_and_its_projector(standin, monkeypatch):
    path = hub.pull("bartowski/Tiny-GGUF")
    alone = hub.pull("ggml/Vision-GGUF", projector=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = len(standin.requests)
    assert hub.pull("bartowski/Tiny-GGUF") == path and find_projector(path) == str(Path(path).with_name("mmproj-Tiny-f16.gguf"))
    assert hub.pull("ggml/Vision-GGUF") == alone and find_projector(alone) is None  # never fetched: the model alone
    assert len(standin.requests) == seen


def test_interrupted_projector_download_resumes(standin, tmp_path, monkeypatch):
    _quick_retries(monkeypatch)
    hub.pull("bartowski/Tiny-GGUF:Q8_0", projector=False)
    standin.drop_first_get = standin.drop_resumes = True
    with pytest.raises(HubError, match="the download of mmproj-Tiny-f16.gguf was interrupted .* run the same command again"):
        hub.pull("bartowski/Tiny-GGUF:Q8_0")
    [partial] = (tmp_path / "hf" / "hub" / "models--bartowski--Tiny-GGUF" / "blobs").glob("*.incomplete")
    assert partial.stat().st_size == len(PROJ) // 2
    standin.drop_resumes = False
    path = hub.pull("bartowski/Tiny-GGUF:Q8_0")
    assert _downloads(standin, "mmproj-Tiny-f16.gguf")[-1][2] == f"bytes={len(PROJ) // 2}-"
    assert Path(find_projector(path)).read_bytes() == PROJ and not partial.exists()


def test_free_space_counts_the_projector(standin):
    with pytest.raises(HubError, match=r"Small-Q4_K_M.gguf with its projector needs \d+\.\d\d GiB"):
        hub.pull("evil/Huge-projector-GGUF")
    assert not _downloads(standin)
    assert Path(hub.pull("evil/Huge-projector-GGUF", projector=False)).read_bytes() == GGUF


def test_hf_flags_fetch_the_projector_unless_mmproj_says_otherwise(standin):
    """--hf pulls its repo's projector, as llama.cpp's -hf; --mmproj none: no model gets one; --mmproj
    FILE: the first model has its own (the others still find theirs beside them)."""

    def projectors(*argv: str) -> int:
        before = len(_downloads(standin, "mmproj-Tiny-f16.gguf"))
        _resolve_hf(build_parser().parse_args(["serve", *argv]))
        return len(_downloads(standin, "mmproj-Tiny-f16.gguf")) - before

    assert projectors("--hf", "bartowski/Tiny-GGUF:Q8_0", "--mmproj", "none") == 0
    assert projectors("--hf", "bartowski/Tiny-GGUF:Q8_0", "--mmproj", "/p/mmproj-mine.gguf") == 0
    assert projectors("--model", "/m/a.gguf", "--hf", "bartowski/Tiny-GGUF:Q8_0", "--mmproj", "/p/mmproj-mine.gguf") == 1


def test_bad_spec():
    with pytest.raises(HubError, match="expected user/repo"):
        hub.parse_spec("../x")


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_models_commands_end_to_end(standin, tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}  # the fixture's HF_ENDPOINT, the stand-in
    found = _cli("models", "search", "tiny", env=env)
    assert found.returncode == 0, found.stderr
    assert "bartowski/Tiny-GGUF" in found.stdout and "900" in found.stdout
    pulled = _cli("models", "pull", "someone/Tiny-split-GGUF", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.strip().endswith("Tiny-Q8_0-00001-of-00003.gguf") and Path(pulled.stdout.strip()).is_file()
    assert "someone/Tiny-split-GGUF" in pulled.stderr
    alone = _cli("models", "pull", "bartowski/Tiny-GGUF:Q8_0", "--mmproj", "none", env=env)
    assert alone.returncode == 0, alone.stderr
    assert "projector" not in alone.stderr and find_projector(alone.stdout.strip()) is None
    both = _cli("models", "pull", "bartowski/Tiny-GGUF:Q8_0", env=env)
    assert both.returncode == 0 and both.stdout == alone.stdout, both.stderr
    assert "Tiny-Q8_0.gguf (Q8_0, 0.0 MiB) + projector mmproj-Tiny-f16.gguf, 0.0 MiB" in both.stderr
    assert find_projector(both.stdout.strip()) == str(Path(both.stdout.strip()).with_name("mmproj-Tiny-f16.gguf"))
    missing = _cli("models", "pull", "bartowski/Tiny-GGUF:Q5_K_M", env=env)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].startswith("error: no Q5_K_M file")
    gated = _cli("serve", "--hf", "meta/Gated-GGUF", env=env)
    assert gated.returncode == 2 and "is gated" in gated.stderr.strip().splitlines()[-1]
