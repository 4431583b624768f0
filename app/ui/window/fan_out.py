"""Fan out: one prompt, one setting swept over a list or range of values, one pane per value.

Every other setting and the seed are the same in every pane, and the panes start together, so the
engine reads their shared prompt once and the replies differ only by the swept setting.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.engine.sampling.fields import SamplingField
from app.engine.sampling.params import NUMERIC_FIELDS
from app.ui import theme
from app.workspace.pane_params import PaneParams
from app.workspace.workspace import MAX_PANES

MAX_SEED = 2**31 - 1  # what a pane's seed field takes


@dataclass(frozen=True)
class Setting:
    name: str  # the PaneParams field
    label: str
    kind: type
    lo: float = 0
    hi: float = 0
    example: str = ""


def _numeric(f: SamplingField) -> Setting:
    """A slider's setting over the field's whole range; the example spans the slider."""
    example = {"temperature": "0.2, 0.7, 1.2  or  0..1.5 step 0.5", "top_k": "1, 10, 40, 0"}.get(f.name, "")
    span = f.slider
    return Setting(f.name, f.label, f.kind, f.lo, f.hi, example or f"{span.lo:g}..{span.hi:g} step {span.step * 10:g}")


SETTINGS = (
    # every number of a pane's ⚙, its Advanced group's too; replies of one length compare best
    *(_numeric(f) for f in NUMERIC_FIELDS if f.name != "max_tokens"),
    Setting("seed", "Seed", int, 0, MAX_SEED, "1, 2, 3, 4  or  1..8"),
    Setting("system_prompt", "System prompt", str, example="one a line; (none) for no system prompt"),
    Setting("model", "Model", str, example="a loaded model's name a line"),
)
NO_SYSTEM_PROMPT = "(none)"
_RANGE = re.compile(r"^\s*(-?[\d.]+)\s*\.\.\s*(-?[\d.]+)\s*(?:step\s+([\d.]+))?\s*$", re.IGNORECASE)


def parse_values(setting: Setting, text: str) -> tuple:
    """The values written as a list ("0.2, 0.7") or a range ("0..1 step 0.25"; step 1 if left out);
    a ValueError that says what is wrong otherwise."""
    if setting.kind is str:
        values = tuple("" if line.strip() == NO_SYSTEM_PROMPT else line.strip() for line in text.splitlines() if line.strip())
    else:
        match = _RANGE.match(text)
        values = (
            _range(setting, *match.groups())
            if match
            else tuple(_number(setting, t) for t in re.split(r"[,;\s]+", text.strip()) if t)
        )
        for value in values:
            if not setting.lo <= value <= setting.hi:
                raise ValueError(f"{setting.label} goes from {setting.lo:g} to {setting.hi:g}; {value:g} is outside")
    if not values:
        raise ValueError(f"write the values of {setting.label.lower()}, e.g. {setting.example}")
    if len(values) > MAX_PANES:
        raise ValueError(f"{len(values)} values: at most {MAX_PANES} panes at once")
    return values


def _number(setting: Setting, token: str):
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"{token!r} is not a number") from None
    if setting.kind is int:
        if not value.is_integer():
            raise ValueError(f"{setting.label} takes whole numbers; {token!r} is not one")
        return int(value)
    return value


def _range(setting: Setting, start: str, stop: str, step: str | None) -> tuple:
    lo, hi = _number(setting, start), _number(setting, stop)
    by = _number(setting, step) if step else (1 if setting.kind is int else None)
    if by is None:
        raise ValueError(f"say the step of the range, e.g. {start}..{stop} step 0.1")
    if by <= 0 or hi < lo:
        raise ValueError("a range goes up from its start to its end by a step above 0")
    n = math.floor((hi - lo) / by + 1e-9) + 1
    if n > MAX_PANES:
        raise ValueError(f"that range has {n} values: at most {MAX_PANES} panes at once")
    return tuple(lo + i * by if setting.kind is int else round(lo + i * by, 6) for i in range(n))


@dataclass(frozen=True)
class Sweep:
    prompt: str
    setting: Setting
    values: tuple
    base: PaneParams  # every other setting, the same in every pane
    seed: int  # locked: the same in every pane, unless the seed is what is swept

    def params_for(self, value) -> PaneParams:
        seed = value if self.setting.name == "seed" else self.seed
        return self.base.with_(**{self.setting.name: value, "seed": seed})

    def label_for(self, value) -> str:
        if self.setting.kind is str:
            shown = value if len(value) <= 24 else f"{value[:11]}…{value[-12:]}"  # a model's end tells its quantization
            return f"{self.setting.label}: {shown or NO_SYSTEM_PROMPT}"
        return f"{self.setting.label} {value:g}"


class FanOutDialog(QDialog):
    """Asks for the prompt, the setting and its values; `sigStart(Sweep)` when the user starts it."""

    sigStart = Signal(object)  # Sweep

    def __init__(
        self,
        base: PaneParams,
        prompt: str = "",
        max_panes: int = MAX_PANES,
        models: tuple[str, ...] = (),
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self._max_panes = max_panes
        self._models = models  # the loaded models' names, the default first
        self.setWindowTitle("Fan out a prompt")
        self._base = base
        self._seed = base.seed if base.seed is not None else random.randint(0, MAX_SEED)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.prompt_edit = QPlainTextEdit(prompt, placeholderText="The message every pane sends")
        self.prompt_edit.setMinimumHeight(70)
        self.setting_combo = QComboBox()
        for setting in SETTINGS:
            self.setting_combo.addItem(setting.label, setting)
        self.values_edit = QPlainTextEdit()
        self.values_edit.setFixedHeight(64)
        self.preview = QLabel(wordWrap=True)
        self.preview.setTextFormat(Qt.TextFormat.PlainText)
        form.addRow("Prompt", self.prompt_edit)
        form.addRow("Setting", self.setting_combo)
        form.addRow("Values", self.values_edit)
        layout.addLayout(form)
        layout.addWidget(self.preview)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.start_button = self.buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self._start)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        for signal in (self.prompt_edit.textChanged, self.values_edit.textChanged):
            signal.connect(self._check)
        self.setting_combo.currentIndexChanged.connect(self._on_setting)
        self.resize(460, 360)
        self._on_setting()

    @property
    def setting(self) -> Setting:
        return self.setting_combo.currentData()

    def _on_setting(self) -> None:
        example = "\n".join(self._models) if self.setting.name == "model" else self.setting.example
        self.values_edit.setPlaceholderText(example)
        self._check()

    def sweep(self) -> Sweep:
        """The sweep as filled in; a ValueError saying what is missing or wrong."""
        prompt = self.prompt_edit.toPlainText().strip()
        values = parse_values(self.setting, self.values_edit.toPlainText())
        if not prompt:
            raise ValueError("write the prompt every pane sends")
        if len(values) > self._max_panes:
            raise ValueError(f"{len(values)} values, but the engine runs at most {self._max_panes} panes at once")
        if self.setting.name == "model":
            values = tuple(v or self._models[0] for v in values)
            missing = [v for v in values if v not in self._models]
            if missing:
                raise ValueError(f"no model named {missing[0]!r} is loaded; loaded: {', '.join(self._models)}")
        return Sweep(prompt, self.setting, values, self._base, self._seed)

    def _check(self) -> None:
        try:
            sweep = self.sweep()
        except ValueError as e:
            self._show(str(e), ok=False)
            return
        shown = ", ".join(sweep.label_for(v).removeprefix(f"{sweep.setting.label}").strip(": ") for v in sweep.values)
        seed = "" if sweep.setting.name == "seed" else f"; every pane with seed {sweep.seed}"
        self._show(f"{len(sweep.values)} panes, {sweep.setting.label.lower()} {shown}{seed}.", ok=True)

    def _show(self, text: str, ok: bool) -> None:
        colours = theme.current()
        self.preview.setText(text)
        self.preview.setStyleSheet(f"color: {(colours.muted if ok else colours.error).name()};")
        self.start_button.setEnabled(ok)

    def _start(self) -> None:
        self.sigStart.emit(self.sweep())
        self.accept()
