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

from app.models import hub
from app.models.hub import HubError, HubModel, check_repo_path, choose_model, group_models, quant_of
from app.models.library import gguf_files
from tests import hub_standin
from tests.hub_standin import HubStandin, StandinRepo

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]

GGUF = b"GGUF" + (bytes(range(256)) * 64)[4:]  # not a model: the hub serves bytes; 16 KiB, halves whole KiBs


def _part(n: int) -> bytes:
    return GGUF + bytes([n]) * 100


def _downloads(standin) -> list[tuple[str, str, str]]:
    return [r for r in standin.requests if r[0] == "GET" and "/resolve/" in r[1]]


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
                "mmproj-Tiny-f16.gguf": GGUF,
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
    assert [r[2] for r in _downloads(standin)] == ["", f"bytes={len(GGUF) // 2}-"]


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
    assert _downloads(standin)[-1][2] == f"bytes={len(GGUF)}-"
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
    assert [r[2] for r in _downloads(standin)] == [""]
    assert not partial.exists()


@pytest.mark.parametrize("had", [len(GGUF), 2 * len(GGUF)], ids=["half", "all but verified"])
def test_range_answered_with_the_whole_file_ends_whole(standin, tmp_path, had):
    """A server that answers a Range with 200 and the whole file: what was there is replaced, not
    appended to, and the file is whole and checked in the same run."""
    standin.ignore_ranges = True
    data = GGUF * 2
    _partial_blob(tmp_path, data, data[: had - 1])
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q8_0")).read_bytes() == data
    assert [r[2] for r in _downloads(standin)] == [f"bytes={had - 1}-"]


def test_dropped_connection_resumed_with_the_whole_file(standin, monkeypatch):
    _quick_retries(monkeypatch)
    standin.drop_first_get = standin.ignore_ranges = True
    assert Path(hub.pull("bartowski/Tiny-GGUF:Q4_K_M")).read_bytes() == GGUF
    assert [r[2] for r in _downloads(standin)] == ["", f"bytes={len(GGUF) // 2}-"]


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
    missing = _cli("models", "pull", "bartowski/Tiny-GGUF:Q5_K_M", env=env)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].startswith("error: no Q5_K_M file")
    gated = _cli("serve", "--hf", "meta/Gated-GGUF", env=env)
    assert gated.returncode == 2 and "is gated" in gated.stderr.strip().splitlines()[-1]
