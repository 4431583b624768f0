"""Presets: a pane's sampling knobs kept under a name, applied to a pane or to all, a few built in, and
written to or read from a JSON file (all or nothing: a bad file changes nothing and says why)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from app.engine.sampling.params import PANE_FIELDS, SamplingParams

from .evented import Signal
from .pane_params import PaneParams

FORMAT = "batch-playground presets"  # what an exported file says it is
MAX_NAME = 64
MAX_FILE_BYTES = 1 << 20  # a presets file is a few KB; more is not one
MAX_PRESETS = 256
BY_NAME = {f.name: f for f in PANE_FIELDS}  # what a preset may hold: the knobs a pane shows
DEFAULTS = SamplingParams()


class PresetError(ValueError):
    """Why a preset cannot be saved, deleted or read (one line)."""


@dataclass(frozen=True)
class Preset:
    name: str
    values: Mapping[str, object] = field(default_factory=dict)  # knob name -> value; the others are left as they are
    builtin: bool = False
    about: str = ""  # what it is for (a built-in's tooltip)

    def applied_to(self, params: PaneParams) -> PaneParams:
        return params.with_(**self.values)

    def to_json(self) -> dict:
        return {"name": self.name, "values": {k: BY_NAME[k].to_json(v) for k, v in self.values.items()}}


def _builtin(name: str, about: str, **changes) -> Preset:
    """Every sampler at llama.cpp's default but `changes` (the reply's length is the pane's own)."""
    values = {f.name: getattr(DEFAULTS, f.name) for f in PANE_FIELDS if f.name != "max_tokens"}
    return Preset(name, {**values, **changes}, builtin=True, about=about)


BUILTIN = (
    _builtin("Precise", "Focused and factual: a low temperature, the unlikely tail cut", temperature=0.3, top_p=0.9, min_p=0.1),
    _builtin("Balanced", "llama.cpp's defaults"),
    _builtin(
        "Creative", "Varied text: a high temperature, XTC removing the likeliest choices half the time, DRY against loops",
        temperature=1.0, top_k=0, top_p=1.0, min_p=0.05, xtc_probability=0.5, xtc_threshold=0.1, dry_multiplier=0.8,
    ),
    _builtin("Deterministic", "Greedy: always the likeliest token, the same reply every time", temperature=0.0, repeat_penalty=1.0),
)  # fmt: skip


class PresetMemory(Protocol):
    """Where the saved presets are kept between runs (the window's settings file): their JSON."""

    saved_presets: str


class PresetBook:
    """The built-in presets and those saved, kept in `memory`; `changed` after a save, a delete or an import."""

    def __init__(self, memory: PresetMemory):
        self._memory = memory
        self.changed = Signal()
        try:
            self._saved = read_presets(memory.saved_presets) if memory.saved_presets else ()
        except PresetError:  # a hand-edited settings file gone wrong: none read (the next save replaces it)
            self._saved = ()

    @property
    def presets(self) -> tuple[Preset, ...]:
        return BUILTIN + self._saved

    @property
    def saved(self) -> tuple[Preset, ...]:
        return self._saved

    def get(self, name: str) -> Preset | None:
        return next((p for p in self.presets if p.name == name), None)

    def save(self, name: str, params: PaneParams) -> Preset:
        """`params`' knobs kept as `name`, in place of a saved preset of that name."""
        name = _checked_name(name)
        preset = Preset(name, {f.name: getattr(params, f.name) for f in PANE_FIELDS})
        self._keep(self._replacing((preset,)))
        return preset

    def delete(self, name: str) -> None:
        if any(p.name == name for p in BUILTIN):
            raise PresetError(f"“{name}” is built in: it cannot be deleted")
        self._keep(tuple(p for p in self._saved if p.name != name))

    def export_json(self) -> str:
        """The saved presets as a file's JSON (the built-in ones come with every copy of the app)."""
        return dumps(self._saved)

    def import_json(self, text: str) -> tuple[str, ...]:
        """Add the presets of a file's JSON (one of a saved name takes its place); their names. A
        bad file raises PresetError, saying why, and changes nothing."""
        presets = read_presets(text)
        self._keep(self._replacing(presets))
        return tuple(p.name for p in presets)

    def _replacing(self, presets: tuple[Preset, ...]) -> tuple[Preset, ...]:
        names = {p.name for p in presets}
        kept = tuple(p for p in self._saved if p.name not in names) + presets
        if len(kept) > MAX_PRESETS:
            raise PresetError(f"at most {MAX_PRESETS} presets are kept; delete some first")
        return kept

    def _keep(self, saved: tuple[Preset, ...]) -> None:
        self._saved = saved
        self._memory.saved_presets = dumps(saved)
        self.changed.emit()


def dumps(presets: tuple[Preset, ...]) -> str:
    return json.dumps({"format": FORMAT, "version": 1, "presets": [p.to_json() for p in presets]}, ensure_ascii=False, indent=1)


def read_presets(text: str) -> tuple[Preset, ...]:
    """The presets of a file's JSON (the exported form, or a bare list of presets); PresetError says
    what is wrong, naming the preset and the knob."""
    if len(text) > MAX_FILE_BYTES:
        raise PresetError(f"the file is larger than {MAX_FILE_BYTES // 1024} KB: it is not a presets file")
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise PresetError(f"the file is not JSON: {e}") from None
    if isinstance(raw, dict) and raw.get("format") == FORMAT:
        raw = raw.get("presets")
    if not isinstance(raw, list):
        raise PresetError(f'the file is not a presets file: it holds no list of presets (an export says "format": "{FORMAT}")')
    if len(raw) > MAX_PRESETS:
        raise PresetError(f"the file holds {len(raw)} presets; at most {MAX_PRESETS} are kept")
    presets = tuple(_preset(item, i) for i, item in enumerate(raw))
    names = [p.name for p in presets]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise PresetError(f"the file names two presets “{twice}”")
    return presets


def _preset(item, index: int) -> Preset:
    if not isinstance(item, dict) or not isinstance(item.get("values"), dict):
        raise PresetError(f'preset {index + 1} is not an object with a "name" and "values"')
    name = item.get("name")
    if not isinstance(name, str):
        raise PresetError(f"preset {index + 1} has no name")
    name = _checked_name(name)
    values = {}
    for key, value in item["values"].items():
        knob = BY_NAME.get(key)
        if knob is None:
            raise PresetError(f"preset “{name}”: {key!r} is not a knob of a pane ({', '.join(BY_NAME)})")
        try:
            values[key] = knob.from_json(value)
        except ValueError as e:
            raise PresetError(f"preset “{name}”: {e}") from None
    return Preset(name, values)


def _checked_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise PresetError(f"a preset's name is 1 to {MAX_NAME} printable characters; got {name[:MAX_NAME]!r}")
    if any(p.name == name for p in BUILTIN):
        raise PresetError(f"“{name}” is a built-in preset: save under another name")
    return name
