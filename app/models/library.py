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
