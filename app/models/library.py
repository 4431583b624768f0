"""Where the GGUF models on this machine are: folders the user adds, the model folders of other local
tools (LM Studio, the Hugging Face hub cache, llama.cpp's cache) and the bundled model. A model split
into parts (name-00001-of-00003.gguf) is one entry. No Qt: the window scans on a worker thread.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .gguf_meta import GgufMeta, format_params, read_gguf

SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q[1-8](?:_[A-Z0-9]{1,4}){0,3}|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP32)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
PROJECTOR_NAME = re.compile(r"mmproj[^/\\]*\.gguf", re.IGNORECASE)  # a vision projector, as repos name them
# of several projectors for a model, once the name and the quant have not told: F16 (llama.cpp's
# converter writes it and repos ship it first), BF16, Q8_0, F32; then the smallest
PROJECTOR_PREFERENCE = ("F16", "BF16", "Q8_0", "F32")
MAX_DEPTH = 6  # LM Studio: models/publisher/repo/file; the hub cache: hub/models--x--y/snapshots/rev/sub/file
MAX_DIRS = 5000  # a folder as big as a home directory is cut short rather than walked for minutes

ADDED = "added"
BUNDLED = "bundled"
LM_STUDIO = "LM Studio"
HUGGING_FACE = "Hugging Face"
LLAMA_CPP = "llama.cpp"


@dataclass(frozen=True)
class ModelFolder:
    """A folder to scan (or one model file), and who put models there."""

    path: str
    source: str = ADDED


def tool_folders(
    env: Mapping[str, str] | None = None, home: str | None = None, platform: str = sys.platform
) -> list[ModelFolder]:
    """The model folders of other local tools that exist here, with their tools' own variables honoured."""
    env = os.environ if env is None else env
    home_dir = Path(home or Path.home())
    cache = Path(env.get("XDG_CACHE_HOME") or home_dir / ".cache")
    hub = env.get("HF_HUB_CACHE") or (Path(env["HF_HOME"]) / "hub" if env.get("HF_HOME") else cache / "huggingface" / "hub")
    if env.get("LLAMA_CACHE"):
        llama = Path(env["LLAMA_CACHE"])
    elif platform == "darwin":
        llama = home_dir / "Library" / "Caches" / "llama.cpp"
    elif platform == "win32":
        llama = Path(env.get("LOCALAPPDATA") or home_dir / "AppData" / "Local") / "llama.cpp"
    else:
        llama = cache / "llama.cpp"
    candidates = [
        ModelFolder(str(home_dir / ".lmstudio" / "models"), LM_STUDIO),
        ModelFolder(str(cache / "lm-studio" / "models"), LM_STUDIO),
        ModelFolder(str(hub), HUGGING_FACE),
        ModelFolder(str(llama), LLAMA_CPP),
    ]
    return [f for f in candidates if os.path.isdir(f.path)]


def gguf_files(folder: str) -> tuple[list[str], bool]:
    """The .gguf files under `folder` (hidden folders skipped, MAX_DEPTH deep); and whether the walk
    was cut short at MAX_DIRS folders. A file that is a link (the hub cache's snapshots) is listed
    under its link's name."""
    if os.path.isfile(folder):
        return [folder], False
    found, root_depth = [], folder.rstrip(os.sep).count(os.sep)
    for dirs_seen, (root, dirs, files) in enumerate(os.walk(folder), 1):
        if dirs_seen > MAX_DIRS:
            return sorted(found), True
        depth = root.count(os.sep) - root_depth
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < MAX_DEPTH)
        found += [os.path.join(root, f) for f in files if f.lower().endswith(".gguf")]
    return sorted(found), False


@dataclass(frozen=True)
class ModelEntry:
    """One model of the library: a file, or the parts of a split model."""

    path: str  # the file to load: a split model's first part
    source: str
    meta: GgufMeta  # the header of `path`
    parts: tuple[str, ...] = ()  # a split model's parts, in order
    size_bytes: int = 0
    n_params: int = 0  # counted from the tensor shapes, every part's
    problem: str = ""  # why it cannot be loaded; empty when it can

    @property
    def name(self) -> str:
        base = os.path.basename(self.path)
        match = SPLIT_NAME.match(base)
        return match["stem"] if match else base.removesuffix(".gguf").removesuffix(".GGUF")

    @property
    def loadable(self) -> bool:
        return not self.problem

    @property
    def params_label(self) -> str:
        """general.size_label ("135M"), else the count from the tensor shapes."""
        return self.meta.size_label or (format_params(self.n_params) if self.n_params else "")

    @property
    def repo(self) -> str:
        """Where the hub cache keeps it ("org/name"); empty elsewhere."""
        for part in Path(self.path).parts:
            if part.startswith("models--"):
                return part.removeprefix("models--").replace("--", "/")
        return ""


@dataclass(frozen=True)
class Scan:
    entries: tuple[ModelEntry, ...]
    files: int  # .gguf files found
    seconds: float
    cut_short: tuple[str, ...] = ()  # folders with more than MAX_DIRS folders in them
    missing: tuple[str, ...] = ()  # folders that are not there (a drive not mounted, a folder moved)


class ModelFinder:
    """Scans folders for models. A file's header is kept while its size and time stay the same, so a
    rescan reads only new and changed files. Thread-safe: the window scans on a worker thread."""

    def __init__(self):
        self._headers: dict[str, tuple[int, int, GgufMeta]] = {}
        self._lock = threading.Lock()

    def read(self, path: str) -> GgufMeta:
        try:
            st = os.stat(path)
        except OSError:
            return read_gguf(path)  # gone or unreadable: the reader says which
        with self._lock:
            cached = self._headers.get(path)
        if cached and cached[:2] == (st.st_size, st.st_mtime_ns):
            return cached[2]
        meta = read_gguf(path)
        with self._lock:
            self._headers[path] = (st.st_size, st.st_mtime_ns, meta)
        return meta

    def scan(self, folders: Iterable[ModelFolder]) -> Scan:
        """Every model in `folders`, folder by folder, by name; a file found twice (the same file
        through two folders, or two hub snapshots of one blob) is listed once."""
        started = time.perf_counter()
        entries, seen, n_files, cut_short, missing = [], set(), 0, [], []
        for folder in folders:
            if not os.path.exists(folder.path):
                missing.append(folder.path)
                continue
            files, cut = gguf_files(folder.path)
            if cut:
                cut_short.append(folder.path)
            files = [f for f in files if _first_sight(f, seen)]
            n_files += len(files)
            entries += [self._entry(group, folder.source) for group in group_parts(files)]
        return Scan(tuple(entries), n_files, time.perf_counter() - started, tuple(cut_short), tuple(missing))

    def _entry(self, parts: list[str], source: str) -> ModelEntry:
        metas = [self.read(p) for p in parts]
        first = metas[0]
        size = sum(m.size_bytes for m in metas)
        n_params = sum(m.n_params for m in metas)
        if len(parts) == 1 and not SPLIT_NAME.match(os.path.basename(parts[0])):
            return ModelEntry(parts[0], source, first, (), size, n_params, _problem(first))
        return ModelEntry(parts[0], source, first, tuple(parts), size, n_params, _split_problem(parts, metas))


def group_parts(files: list[str]) -> list[list[str]]:
    """The files, a split model's parts together (in part order), each group in name order."""
    groups: dict[tuple[str, str], list[str]] = {}
    for f in files:
        match = SPLIT_NAME.match(os.path.basename(f))
        key = (os.path.dirname(f), f"{match['stem']}-of-{match['count']}") if match else (f, "")
        groups.setdefault(key, []).append(f)
    return [sorted(g) for _, g in sorted(groups.items(), key=lambda kv: kv[1][0].lower())]


def quant_of(file_name: str) -> str:
    """The quantization a GGUF file's name says (Q4_K_M, IQ4_XS, F16...), upper case; "" when none."""
    stem = os.path.basename(file_name)
    match = SPLIT_NAME.match(stem)
    stem = match["stem"] if match else re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    found = QUANT.findall(stem)
    return found[-1].upper() if found else ""


def is_projector(name: str) -> bool:
    """Whether a file is named as a vision projector (mmproj*.gguf, any case), in whatever folder."""
    return bool(PROJECTOR_NAME.fullmatch(re.split(r"[/\\]", name)[-1]))


def choose_projector(model: str, projectors: Iterable[tuple[str, int | None]]) -> str | None:
    """Which of `projectors` (paths, or a repo's file names, with their sizes where known) `model`
    loads with. Only those in the folder nearest the model's count: its own, else the nearest one
    above it (a repo with its quants in folders and one projector at its root); one in another folder
    is never the model's. Of those, the one whose name shares the most words with the model's (a
    folder of two models' projectors), then the one of the model's quant, then PROJECTOR_PREFERENCE's
    first, then the smallest, then by name. None when none is near."""
    below = _folders(os.path.dirname(model))
    near: dict[int, list[tuple[str, int | None]]] = {}
    for name, size in projectors:
        folder = _folders(os.path.dirname(name))
        if below[: len(folder)] == folder:
            near.setdefault(len(below) - len(folder), []).append((name, size))
    if not near:
        return None
    words, quant = _name_words(model), quant_of(model)

    def rank(item: tuple[str, int | None]) -> tuple:
        name, size = item
        own = quant_of(name)
        preferred = PROJECTOR_PREFERENCE.index(own) if own in PROJECTOR_PREFERENCE else len(PROJECTOR_PREFERENCE)
        return -len(_name_words(name) & words), not quant or own != quant, preferred, size is None, size or 0, name

    return min(near[min(near)], key=rank)[0]


def find_projector(model_path: str) -> str | None:
    """The vision projector beside a model: an mmproj*.gguf in its folder (as repos ship them, and
    `models pull` fetches them); for a model in a folder of a Hugging Face cache snapshot, else one in
    the nearest folder above it up to the snapshot's root (where `models pull` fetched the repo's root
    projector). choose_projector picks of several. None when there is none."""
    path = Path(os.path.abspath(model_path))
    root = _snapshot_root(path)
    for folder in path.parents:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        found = [
            (str(folder / n), os.path.getsize(folder / n))
            for n in names
            if PROJECTOR_NAME.fullmatch(n) and n != path.name and os.path.isfile(folder / n)
        ]
        if found:
            return choose_projector(str(path), found)
        if root is None or folder == root:
            return None
    return None


def _snapshot_root(path: Path) -> Path | None:
    """The snapshot folder of the hub cache (models--org--name/snapshots/<commit>) that `path` lies in, if any."""
    parts = path.parts
    for i in range(1, len(parts) - 2):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--") and re.fullmatch(r"[0-9a-f]{40}", parts[i + 1]):
            return Path(*parts[: i + 2])
    return None


def _folders(folder: str) -> list[str]:
    return [part for part in re.split(r"[/\\]", folder) if part]


def _name_words(name: str) -> set[str]:
    """The words of a file's name that tell one model from another: not its quant, nor mmproj, nor gguf."""
    base = re.split(r"[/\\]", name)[-1]
    match = SPLIT_NAME.match(base)
    stem = match["stem"] if match else re.sub(r"\.gguf$", "", base, flags=re.IGNORECASE)
    return {w for w in re.split(r"[-_.\s]+", QUANT.sub(" ", stem).lower()) if w and w != "mmproj"}


def _first_sight(path: str, seen: set[str]) -> bool:
    real = os.path.realpath(path)
    if real in seen:
        return False
    seen.add(real)
    return True


def _problem(meta: GgufMeta, part_of_split: bool = False) -> str:
    """Why a file cannot be loaded as a model: its header's error, or what it is instead (a split
    model's first part may hold no weights: they are in the other parts)."""
    if meta.error:
        return meta.error
    if meta.kind == "mmproj" or meta.architecture == "clip":
        return "a vision projector (mmproj) for another model, not a model of its own"
    if meta.kind == "adapter":
        return "a LoRA adapter for another model, not a model of its own"
    if not meta.tensors and not part_of_split:
        return "a vocabulary only: it has no weights"
    return ""


def _split_problem(parts: list[str], metas: list[GgufMeta]) -> str:
    match = SPLIT_NAME.match(os.path.basename(parts[0]))
    count = int(match["count"]) if match else metas[0].split_count
    have = {int(m["no"]) for p in parts if (m := SPLIT_NAME.match(os.path.basename(p)))}
    missing = [n for n in range(1, count + 1) if n not in have]
    if missing:
        listed = ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else "")
        return f"part{'s' if len(missing) > 1 else ''} {listed} of {count} missing"
    for n, meta in enumerate(metas, 1):
        if meta.error:
            return f"part {n} of {count}: {meta.error}"
    return _problem(metas[0], part_of_split=True)
