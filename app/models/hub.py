"""Models from the Hugging Face hub: search GGUF repos, list a repo's quants, pick one for
`user/repo[:quant]` as llama.cpp does, and download it into the hub cache (huggingface_hub's own:
resume, checksums, HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE). What a hub sends is bounded: a file name
that could leave the cache, or a file larger than the free disk, is refused before anything is written."""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get, repo_folder_name
from huggingface_hub.utils import WeakFileLock, build_hf_headers

from .library import SPLIT_NAME, choose_projector, is_projector, quant_of

DEFAULT_ENDPOINT = "https://huggingface.co"
# none named: Q4_K_M (llama.cpp's default tag), else the first of these the repo has, else the smallest
QUANT_PREFERENCE = ("Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0", "Q6_K", "Q8_0")
WINDOWS_RESERVED = re.compile(r"^(CON|PRN|AUX|NUL|COM\d|LPT\d)(\..*)?$", re.IGNORECASE)
MAX_NAME_BYTES = 255  # a path component, on most file systems


class HubError(Exception):
    """A pull or a search that cannot go on; the message is one line, fit to show as it is."""


class HubUnreachable(HubError):
    """The hub did not answer (no network, a firewall). Its message ends with the command line's way
    out; `reason` is the message without it, for the window, where that variable does not help."""

    def __init__(self, reason: str):
        super().__init__(f"{reason}; HF_HUB_OFFLINE=1 uses the cache only")
        self.reason = reason


@dataclass(frozen=True)
class RepoHit:
    """One repo a search found."""

    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None


@dataclass(frozen=True)
class HubModel:
    """One model of a repo: a GGUF file, or a split model's parts (in part order)."""

    files: tuple[str, ...]
    size: int | None  # bytes, all parts; None when the hub did not say
    quant: str  # upper case, "" when the name has none

    @property
    def name(self) -> str:
        return self.files[0]


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir(env: dict | None = None) -> Path:
    """Where huggingface_hub keeps downloads, read from the environment now (its constants are read once)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"


def is_offline() -> bool:
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def parse_spec(spec: str) -> tuple[str, str]:
    """`user/repo[:quant]` as (repo id, quant or "")."""
    repo, _, quant = spec.strip().partition(":")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", repo) or ".." in repo:
        raise HubError(f"expected user/repo[:quant] (e.g. bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M), got {spec!r}")
    return repo, quant.strip()


def check_repo_path(name: str) -> None:
    """Refuse a repo file name that could leave the cache or that this OS cannot write."""
    why = ""
    if "\0" in name:
        why = "it holds a NUL"
    elif name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        why = "it is an absolute path"
    elif any(part in ("..", ".") for part in re.split(r"[/\\]", name)):
        why = "it holds '..' or '.'"
    elif any(part == "" for part in name.split("/")):
        why = "it has an empty folder name"
    elif any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in name.split("/")):
        why = f"a part of it is longer than {MAX_NAME_BYTES} bytes"
    elif any(ord(c) < 32 for c in name):
        why = "it holds a control character"
    elif sys.platform == "win32" and (
        re.search(r'[<>:"|?*\\]', name) or any(WINDOWS_RESERVED.match(p) or p.endswith((" ", ".")) for p in name.split("/"))
    ):
        why = "Windows cannot write that name"
    if why:
        raise HubError(f"refusing the hub's file name {name[:120]!r}: {why}")


def group_models(files: list[tuple[str, int | None]]) -> list[HubModel]:
    """A repo's GGUF files as models: a split model's parts together; vision projectors (mmproj) left out."""
    groups: dict[str, list[tuple[str, int | None]]] = {}
    for name, size in files:
        base = os.path.basename(name)
        if not base.lower().endswith(".gguf") or is_projector(base):
            continue
        match = SPLIT_NAME.match(base)
        key = f"{os.path.dirname(name)}/{match['stem']}-of-{match['count']}" if match else name
        groups.setdefault(key, []).append((name, size))
    models = []
    for parts in groups.values():
        parts.sort()
        sizes = [s for _, s in parts]
        total = None if None in sizes else sum(sizes)
        models.append(HubModel(tuple(n for n, _ in parts), total, quant_of(parts[0][0])))
    return sorted(models, key=lambda m: m.name.lower())


def choose_model(models: list[HubModel], quant: str, repo_id: str = "") -> HubModel:
    """llama.cpp's meaning of `repo:quant`: the named quant (any case); none named: Q4_K_M, else the
    first of QUANT_PREFERENCE, else the smallest."""
    where = f" in {repo_id}" if repo_id else ""
    if not models:
        raise HubError(f"no GGUF file{where}")
    if quant:
        named = [m for m in models if m.quant == quant.upper()]
        if not named:
            have = ", ".join(sorted({m.quant or m.name for m in models}))
            raise HubError(f"no {quant} file{where}; it has: {have}")
        return named[0]
    for preferred in QUANT_PREFERENCE:
        for model in models:
            if model.quant == preferred:
                return model
    return min(models, key=lambda m: (m.size is None, m.size or 0, m.name))


def search(text: str, limit: int = 20) -> list[RepoHit]:
    """GGUF repos whose name matches `text`, the most downloaded first."""
    with _hub_errors(text):
        found = HfApi(endpoint=hub_endpoint()).list_models(search=text, filter="gguf", sort="downloads", limit=limit)
        return [RepoHit(m.id, m.downloads or 0, m.likes or 0, m.last_modified) for m in found]


def list_models(repo_id: str) -> list[HubModel]:
    """The repo's GGUF models with their sizes; offline, those of its cached snapshot."""
    return group_models(_repo_files(repo_id))


def _repo_files(repo_id: str) -> list[tuple[str, int | None]]:
    """The repo's files with their sizes where the hub says them; offline, the GGUF files of its cached snapshot."""
    if is_offline():
        return _cached_files(repo_id)
    with _hub_errors(repo_id):
        info = HfApi(endpoint=hub_endpoint()).model_info(repo_id, files_metadata=True)
    return [(s.rfilename, s.size) for s in info.siblings or []]


def pull(
    spec: str,
    progress: Callable[[str], None] | None = None,
    on_bytes: Callable[[int, int | None], None] | None = None,
    projector: bool = True,
) -> str:
    """Download `user/repo[:quant]` (every part of a split model) into the hub cache, with the repo's
    vision projector for it where it has one (library.choose_projector's: in the model's folder or the
    nearest above it, where the engine finds it; `projector=False`: not it, llama.cpp's --no-mmproj);
    the local path of the model's (first) file. What is already cached is not fetched again (offline:
    a projector not cached is left out); a dropped connection resumes. `on_bytes(done, total)` is
    called as the bytes arrive (all files together); what it raises stops the download, whose partial
    blob stays for the next pull to resume."""
    repo_id, quant = parse_spec(spec)
    files = _repo_files(repo_id)
    model = choose_model(group_models(files), quant, repo_id)
    sizes = dict(files)
    mmproj = choose_projector(model.name, [(n, s) for n, s in files if is_projector(n)]) if projector else None
    fetched = [(name, sizes[name]) for name in (*model.files, *([mmproj] if mmproj else []))]
    for name, _ in fetched:
        check_repo_path(name)
    _check_parts_present(model)
    total = None if any(size is None for _, size in fetched) else sum(size for _, size in fetched)
    cache = hub_cache_dir()
    if not is_offline():
        _check_free_space(repo_id, model.name + (" with its projector" if mmproj else ""), fetched, cache)
    if progress:
        size = f", {model.size / 2**20:.1f} MiB" if model.size is not None else ""
        parts = f", {len(model.files)} parts" if len(model.files) > 1 else ""
        line = f"{repo_id}: {model.name} ({model.quant or 'no quant in its name'}{parts}{size})"
        if mmproj:
            line += f" + projector {mmproj}" + (f", {sizes[mmproj] / 2**20:.1f} MiB" if sizes[mmproj] is not None else "")
        progress(line)
    paths, done = [], 0
    for name, _ in fetched:
        bar = functools.partial(_ByteProgress, on_bytes, done, total) if on_bytes else None
        with _hub_errors(repo_id, name):
            if not is_offline():
                _fetch_blob(repo_id, name, cache, bar)
            path = hf_hub_download(
                repo_id, name, cache_dir=cache, endpoint=hub_endpoint(), local_files_only=is_offline(), tqdm_class=bar
            )
        paths.append(path)
        done += os.path.getsize(path)
        if on_bytes:
            on_bytes(done, total)
    return paths[0]


class _ByteProgress:
    """huggingface_hub's progress bar (its tqdm_class) as calls of on_bytes(bytes so far, total)."""

    def __init__(self, on_bytes, before: int, model_size: int | None, *, initial: int = 0, **_):
        self.on_bytes, self.before, self.model_size, self.n = on_bytes, before, model_size, initial
        on_bytes(before + initial, model_size)  # where it starts: a resumed download, past 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        self.on_bytes(self.before + self.n, self.model_size)

    def close(self) -> None:
        pass


def _fetch_blob(repo_id: str, name: str, cache: Path, tqdm_class=None) -> None:
    """Download a file's blob where huggingface_hub keeps it (blobs/<etag>) through blobs/<etag>.incomplete,
    which a later run resumes with a Range request: 2.4.0 writes to a name of its own each run and deletes
    it on failure. A server that answers the Range with 200 and the whole file: http_get rewinds to 0
    and takes it all. The size, and the sha256 when the ETag is one (an LFS file), are checked before the
    blob takes its name; hf_hub_download then finds it and links it into the snapshot."""
    url = hf_hub_url(repo_id, name, endpoint=hub_endpoint())
    meta = get_hf_file_metadata(url, endpoint=hub_endpoint())
    if not meta.etag or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", meta.etag):
        return  # an ETag that is no git or LFS hash: huggingface_hub downloads it its own way
    repo_dir = repo_folder_name(repo_id=repo_id, repo_type="model")
    blob = cache / repo_dir / "blobs" / meta.etag
    partial = blob.with_name(meta.etag + ".incomplete")
    lock = cache / ".locks" / repo_dir / f"{meta.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):  # huggingface_hub's own lock of this blob
        if blob.exists():
            return
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"  # no gzip: a Range counts the bytes of the file itself
        if urlsplit(meta.location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed CDN address: no token
        with open(partial, "ab") as f:
            if meta.size is not None and f.tell() > meta.size:
                f.truncate(0)  # longer than the file: no prefix of it, start over
                f.seek(0)  # truncate leaves the position, which is the resume size: a Range past the end
            http_get(
                meta.location,
                f,
                resume_size=f.tell(),
                headers=headers,
                expected_size=meta.size,
                displayed_filename=name,
                tqdm_class=tqdm_class,
            )
        _check_blob(partial, meta.size, meta.etag, name)
        os.replace(partial, blob)


def _check_blob(path: Path, size: int | None, etag: str, name: str) -> None:
    """Refuse (and delete) a download whose size or sha256 is not the hub's."""
    why = ""
    if size is not None and path.stat().st_size != size:
        why = f"{path.stat().st_size} bytes, not {size}"
    elif len(etag) == 64:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(2**20):
                digest.update(chunk)
        why = "" if digest.hexdigest() == etag else "its sha256 is not the hub's"
    if why:
        path.unlink()
        raise HubError(f"{name} arrived damaged ({why}); run the same command again to fetch it anew")


def _check_parts_present(model: HubModel) -> None:
    match = SPLIT_NAME.match(os.path.basename(model.name))
    if match and len(model.files) != int(match["count"]):
        raise HubError(f"{model.name}: the repo has {len(model.files)} of its {int(match['count'])} parts")


def _check_free_space(repo_id: str, what: str, files: list[tuple[str, int | None]], cache: Path) -> None:
    """Refuse before downloading what the disk cannot hold (what is already cached does not count);
    `files` with their sizes, None where the listing did not say it (asked of the file then)."""
    needed = 0
    for name, listed in files:
        if _cached_path(cache, repo_id, name):
            continue
        size = listed if listed is not None else _remote_size(repo_id, name)
        if size is not None:
            needed += size
    needed -= _partial_bytes(cache, repo_id)
    folder = cache
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise HubError(f"{what} needs {needed / 2**30:.2f} GiB, and {folder} has {free / 2**30:.2f} GiB free")


def _partial_bytes(cache: Path, repo_id: str) -> int:
    """What earlier pulls of the repo left to resume (a pull of another quant of it may count them too)."""
    blobs = cache / repo_folder_name(repo_id=repo_id, repo_type="model") / "blobs"
    found = blobs.glob("*.incomplete") if blobs.is_dir() else []
    return sum(p.stat().st_size for p in found if re.fullmatch(r"[0-9a-f]+\.incomplete", p.name))


def _remote_size(repo_id: str, name: str) -> int | None:
    with _hub_errors(repo_id, name):
        return get_hf_file_metadata(hf_hub_url(repo_id, name, endpoint=hub_endpoint())).size


def _cached_path(cache: Path, repo_id: str, name: str) -> str | None:
    snapshot = _cached_snapshot(cache, repo_id)
    path = snapshot / name if snapshot else None
    return str(path) if path and path.is_file() else None


def _cached_snapshot(cache: Path, repo_id: str) -> Path | None:
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    snapshot = repo_dir / "snapshots" / commit
    return snapshot if re.fullmatch(r"[0-9a-f]{40}", commit) and snapshot.is_dir() else None


def _cached_files(repo_id: str) -> list[tuple[str, int | None]]:
    """The whole GGUF files of a repo's cached snapshot (a partial download is a blob, never here)."""
    snapshot = _cached_snapshot(hub_cache_dir(), repo_id)
    if snapshot is None:
        raise HubError(f"{repo_id} is not in the cache and HF_HUB_OFFLINE is set: pull it once online")
    found = []
    for root, _, files in os.walk(snapshot):
        for f in files:
            path = Path(root) / f
            if f.lower().endswith(".gguf") and path.is_file():
                found.append((path.relative_to(snapshot).as_posix(), path.stat().st_size))
    return found


class _hub_errors:
    """huggingface_hub's and the network's exceptions as one-line HubErrors."""

    def __init__(self, repo_id: str, file_name: str = ""):
        self.repo_id, self.file_name = repo_id, file_name

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None or isinstance(error, HubError):
            return False
        if isinstance(error, (httpx2.ConnectError, httpx2.ConnectTimeout)):
            raise HubUnreachable(f"cannot reach the hub at {hub_endpoint()} (no network?)") from error
        message = self.message(error)
        if message is None:
            return False
        raise HubError(message) from error

    def message(self, error: BaseException) -> str | None:
        repo, name = self.repo_id, self.file_name or self.repo_id
        if isinstance(error, GatedRepoError):
            return (
                f"{repo} is gated: accept its licence at {hub_endpoint()}/{repo} while signed in, "
                "then set HF_TOKEN to an access token of that account"
            )
        if isinstance(error, RepositoryNotFoundError):
            return f"no repo {repo} on the hub (a private one needs HF_TOKEN)"
        if isinstance(error, RevisionNotFoundError):
            return f"{repo} has no main revision"
        if isinstance(error, (OfflineModeIsEnabled, LocalEntryNotFoundError)):
            return f"cannot reach the hub at {hub_endpoint()} and {name} is not in the cache (no network?)"
        if isinstance(error, EntryNotFoundError):
            return f"{repo} has no file {name}"
        if isinstance(error, (httpx2.TransportError, httpx2.TimeoutException)):
            return f"the download of {name} was interrupted ({type(error).__name__}); run the same command again"
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return f"the disk is full while downloading {name}; free some space and run again to resume"
        if isinstance(error, HfHubHTTPError):
            return f"the hub refused ({str(error).splitlines()[0]})"
        if isinstance(error, OSError) and "Consistency check failed" in str(error):
            return f"{name} arrived with the wrong size; run the same command again"
        return None
