"""A pane's sampling sliders, each showing its value (typed, it may go past the slider's span within
the knob's range), the Advanced group of llama.cpp's other samplers (folded), its switches and where
it chats; edits apply to the pane's next request."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QIntValidator, QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.sampling.fields import SamplingField
from app.engine.sampling.params import ADVANCED_FIELDS, BY_NAME, SLIDER_FIELDS, SamplingParams
from app.remote import Endpoint
from app.ui import theme
from app.workspace.pane_params import CHECKED_HERE, TYPED_FORMATS, PaneParams
from app.workspace.presets import Preset, PresetBook

from .bias_editor import BiasEditor, TokenReader
from .preset_row import PresetRow


@dataclass(frozen=True)
class SliderSpec:
    """A pane's slider over one sampling field (its knob in sampling/params.py declares its span, step and help)."""

    name: str  # the PaneParams field
    label: str
    lo: float
    hi: float
    step: float
    tooltip: str
    whole: bool  # an int field

    @classmethod
    def of(cls, f: SamplingField) -> SliderSpec:
        return cls(f.name, f.label, f.slider.lo, f.slider.hi, f.slider.step, f.tooltip, f.kind is int)

    def to_int(self, value: float) -> int:
        return round((value - self.lo) / self.step)

    def to_value(self, position: int) -> float:
        value = self.lo + position * self.step
        return int(round(value)) if self.whole else round(value, 4)


SLIDERS = tuple(SliderSpec.of(f) for f in SLIDER_FIELDS)  # the main ones
ADVANCED_SLIDERS = tuple(SliderSpec.of(f) for f in ADVANCED_FIELDS if f.slider is not None)
LIST_FIELDS = tuple(f for f in ADVANCED_FIELDS if f.kind is tuple and f.items != "bias")  # typed in a line
DEFAULTS = SamplingParams()
OUTPUTS = (  # (label, PaneParams.output_format)
    ("Free text", "free"),
    ("JSON", "json"),
    ("JSON schema", "schema"),
    ("GBNF grammar", "grammar"),
    ("Lark grammar", "lark"),
    ("Regular expression", "regex"),
)
OUTPUT_TIP = (
    "The format every reply follows: free text; any JSON object; JSON valid under a schema; text a\n"
    "GBNF grammar allows; text a Lark grammar allows (as llguidance takes it: /regex/ terminals,\n"
    "%json {schema}); or text a regular expression (Rust's syntax) matches whole. What is typed is\n"
    "checked by llguidance as it is typed, its error shown below with its line and column.\n"
    "A constrained reply matches when it stops; one that max tokens cut is marked cut."
)
PLACEHOLDERS = {
    "schema": 'A JSON schema, e.g. {"type": "object", "properties": {"name": {"type": "string"}}}',
    "grammar": 'A GBNF grammar, e.g. root ::= "yes" | "no"',
    "lark": 'A Lark grammar, e.g. start: "#" /[0-9a-f]{6}/',
    "regex": "A regular expression the whole reply matches, e.g. [0-9]{3}-[a-z]{2}",
}
CHECKED = {  # what a format that passed the check is, for the local engine
    "schema": "valid schema",
    "grammar": "grammar within bounds (compiled by llguidance)",
    "lark": "Lark grammar compiled by llguidance",
    "regex": "regular expression compiled by llguidance",
}
LOADED_AS = {".gbnf": "grammar", ".lark": "lark", ".regex": "regex"}  # a file's format by its suffix; else a schema
MAX_BUDGET = 131072  # thinking tokens at most: more than any context holds
BUDGET_TIP = (
    "How many tokens a thinking model may think before its family's closing marker is put in\n"
    "and it answers (llama-server's --reasoning-budget); no limit: it thinks as long as it likes."
)
VALUE_WIDTH = 52  # a slider's typed value: "65536", "-1.00"
CHECK_DELAY_MS = 300  # the schema or grammar is checked this long after the last keystroke
LOADED_BYTES = 1 << 20  # a file loaded as a schema or grammar is read up to this (the check says when too long)


@dataclass(frozen=True)
class Switch:
    name: str  # the PaneParams field
    label: str
    what: str = ""


SWITCHES = (
    Switch("high_priority", "High priority (under the priority policy)"),
    Switch(
        "show_probs", "Token probabilities",
        "Tint each token of a reply by how likely the model thought it: the more doubt, the redder.\n"
        "Hover a token for its likeliest rivals, before and after this pane's samplers;\n"
        "click one to branch: a new pane goes on from that token.",
    ),
    Switch(
        "completion", "Completion mode",
        "The chat is one text the model continues, without a chat template: for base models\n"
        "(a model with no chat template opens its new panes so). Off: turns of a chat.",
    ),
    Switch(
        "builtin_template", "Built-in chat template (ChatML)",
        "Render the chat with the app's own ChatML template instead of the one in the model file:\n"
        "for a model whose template fails, loops or refuses the chat. Off: the model's own.",
    ),
    Switch(
        "draft_ahead", "Draft ahead (speculative)",
        "Where the engine speculates (Engine panel: Speculative decoding), a greedy reply guesses\n"
        "its next tokens from the chat and checks them in the same step: the same reply, sooner\n"
        "when it quotes the chat. Off: this pane never drafts.",
    ),
    Switch(
        "think", "Think (a thinking model)",
        "A model that thinks before it answers (its chat template tells: DeepSeek R1, Qwen3, gpt-oss...)\n"
        "shows its thoughts folded above the answer. Off: its template's enable_thinking is false, and\n"
        "thoughts the template opens are closed at once, so it answers straight away.",
    ),
)  # fmt: skip


class SeedValidator(QIntValidator):
    """A seed, or nothing (random). QLineEdit finishes an edit only on acceptable text, and to
    QIntValidator empty text is not: a cleared field kept the old seed."""

    def validate(self, text: str, pos: int):
        if not text.strip():
            return QValidator.State.Acceptable
        return super().validate(text, pos)


class PaneParamsEditor(QWidget):
    """Sliders + seed + system prompt bound to one PaneParams; emits `sigParamsChanged` on every edit."""

    sigParamsChanged = Signal(object)  # PaneParams
    sigCopyToAll = Signal()
    sigPresetToAll = Signal(object)  # a Preset for every pane

    def __init__(self, params: PaneParams, parent=None):
        super().__init__(parent)
        self._params = params
        self.sliders: dict[str, QSlider] = {}
        self.values: dict[str, QLineEdit] = {}  # each slider's value, which may be typed
        self._refusals: dict[str, QLabel] = {}  # under a slider: why a typed value was refused
        form = QFormLayout(self)
        form.setContentsMargins(4, 2, 4, 2)
        form.setVerticalSpacing(2)
        for spec in SLIDERS:
            form.addRow(spec.label, self._slider_row(spec))
            form.labelForField(self.sliders[spec.name].parentWidget()).setToolTip(spec.tooltip)
        self.seed_edit = QLineEdit()
        self.seed_edit.setPlaceholderText("random")
        self.seed_edit.setValidator(SeedValidator(0, 2**31 - 1))
        self.seed_edit.editingFinished.connect(self._on_seed)
        form.addRow("Seed", self.seed_edit)
        self.preset_row = PresetRow(lambda: self._params)
        self.preset_row.sigApply.connect(self._apply_preset)
        form.addRow("Preset", self.preset_row)
        self._advanced_rows(form)
        self.system_edit = QPlainTextEdit()
        self.system_edit.setPlaceholderText("System prompt (optional)")
        self.system_edit.setFixedHeight(48)
        self.system_edit.textChanged.connect(self._on_system)
        form.addRow("System", self.system_edit)
        self.switches: dict[str, QCheckBox] = {}
        for switch in SWITCHES:
            box = self.switches[switch.name] = QCheckBox(switch.label, toolTip=switch.what)
            box.toggled.connect(lambda on, name=switch.name: self._on_switch(name, on))
            form.addRow("", box)
        self.high_priority, self.show_probs, self.completion, self.builtin_template, self.draft_ahead, self.think = (
            self.switches.values()
        )
        self.budget_spin = QSpinBox(toolTip=BUDGET_TIP)
        self.budget_spin.setRange(-1, MAX_BUDGET)
        self.budget_spin.setSpecialValueText("no limit")  # shown for -1
        self.budget_spin.setSuffix(" tokens")
        self.budget_spin.valueChanged.connect(lambda value: self._update(reasoning_budget=value))
        form.addRow("Thinking budget", self.budget_spin)
        self.switch_labels = {switch.name: switch.label for switch in SWITCHES}
        self._engine_drafts = True  # whether the engine speculates: Draft ahead means something only then
        self._output_rows(form)
        self.endpoint_edits = self._endpoint_rows(form)
        self.copy_button = QPushButton("Copy these settings to all panes")
        self.copy_button.clicked.connect(self.sigCopyToAll)  # signal to signal: Qt drops `checked`
        form.addRow("", self.copy_button)
        self.set_params(params)

    @property
    def params(self) -> PaneParams:
        return self._params

    def set_params(self, params: PaneParams) -> None:
        """Show `params` (e.g. copied from another pane) and announce them once."""
        self._params = params
        for spec in SLIDERS + ADVANCED_SLIDERS:
            slider = self.sliders[spec.name]
            slider.blockSignals(True)
            slider.setValue(spec.to_int(getattr(params, spec.name)))
            slider.blockSignals(False)
            self._show_value(spec)
            self._refusals[spec.name].hide()
        for f in LIST_FIELDS:
            self._show_list(f, getattr(params, f.name))
            self._refusals[f.name].hide()
        self.bias_editor.set_entries(params.logit_bias)
        self._show_advanced_count()
        self.seed_edit.setText("" if params.seed is None else str(params.seed))
        self.system_edit.blockSignals(True)
        self.system_edit.setPlainText(params.system_prompt)
        self.system_edit.blockSignals(False)
        for name, box in self.switches.items():
            box.blockSignals(True)
            box.setChecked(getattr(params, name))
            box.blockSignals(False)
        self._show_draft_switch()
        self.budget_spin.blockSignals(True)
        self.budget_spin.setValue(max(params.reasoning_budget, -1))
        self.budget_spin.blockSignals(False)
        self.budget_spin.setEnabled(params.think)
        for name, edit in self.endpoint_edits.items():
            edit.setText(getattr(params, name))
        self.api_combo.blockSignals(True)
        self.api_combo.setCurrentIndex(max(self.api_combo.findData(params.remote_api), 0))
        self.api_combo.blockSignals(False)
        self.output_combo.blockSignals(True)
        self.output_combo.setCurrentIndex(max(self.output_combo.findData(params.output_format), 0))
        self.output_combo.blockSignals(False)
        if self.output_edit.toPlainText() != params.output_text:
            self.output_edit.blockSignals(True)
            self.output_edit.setPlainText(params.output_text)
            self.output_edit.blockSignals(False)
        self._show_output_rows()
        self.sigParamsChanged.emit(params)

    def show_engine_drafts(self, drafts: bool) -> None:
        """Whether the engine speculates (Engine panel: Speculative decoding), so that Draft ahead
        is never ticked where nothing drafts."""
        self._engine_drafts = drafts
        self._show_draft_switch()

    def _show_draft_switch(self) -> None:
        """Ticked as the pane's choice where the engine speculates; else unticked and greyed, saying
        why, the choice kept for when it does."""
        box, on = self.draft_ahead, self._engine_drafts
        box.blockSignals(True)
        box.setChecked(self._params.draft_ahead and on)
        box.blockSignals(False)
        box.setEnabled(on)
        box.setText(self.switch_labels["draft_ahead"] if on else "Draft ahead: the engine does not speculate")

    # -- output format ---------------------------------------------------------------------------

    def _output_rows(self, form: QFormLayout) -> None:
        """Output: a format; for a schema or a grammar, its text (typed, or loaded from a file) and its check."""
        self._form = form
        self.output_combo = QComboBox(toolTip=OUTPUT_TIP)
        for label, name in OUTPUTS:
            self.output_combo.addItem(label, name)
        self.output_combo.currentIndexChanged.connect(self._on_output_format)
        form.addRow("Output", self.output_combo)
        self.output_edit = QPlainTextEdit()
        self.output_edit.setFixedHeight(96)
        self.output_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.output_edit.setTabChangesFocus(True)
        self.output_edit.textChanged.connect(self._on_output_text)
        form.addRow("", self.output_edit)
        self.load_button = QPushButton(
            "Load…", toolTip="Load a JSON schema (.json), a GBNF (.gbnf) or Lark (.lark) grammar or a regular expression (.regex)"
        )
        self.load_button.clicked.connect(self._load_output_file)
        self.output_check = QLabel()
        self.output_check.setWordWrap(True)
        self.output_check.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.output_check, 1)
        layout.addWidget(self.load_button, 0, Qt.AlignmentFlag.AlignTop)
        self._output_check_row = row
        form.addRow("", row)
        self._check_timer = QTimer(self, interval=CHECK_DELAY_MS, timeout=self._check_output)
        self._check_timer.setSingleShot(True)

    def _on_output_format(self, _index: int) -> None:
        self._update(output_format=self.output_combo.currentData())
        self._show_output_rows()

    def _on_output_text(self) -> None:
        self._update(output_text=self.output_edit.toPlainText())
        self._check_timer.start()  # checked once typing pauses

    def _show_output_rows(self) -> None:
        fmt = self._params.output_format
        shown = fmt in TYPED_FORMATS
        self._form.setRowVisible(self.output_edit, shown)
        self._form.setRowVisible(self._output_check_row, shown)
        self.output_edit.setPlaceholderText(PLACEHOLDERS.get(fmt, ""))
        if shown:
            self._check_output()

    def _check_output(self) -> None:
        """Say whether the schema, grammar or expression can constrain a reply, or why not (in one
        line, with the line and column llguidance gives)."""
        self._check_timer.stop()
        problem = self._params.format_problem()
        colours = theme.current()
        if problem is None:
            self.output_check.setText(f"✓ {self._output_ok()}")
            self.output_check.setStyleSheet(f"color: {colours.text.name()};")
        else:
            self.output_check.setText(f"✗ {problem}")
            self.output_check.setStyleSheet(f"color: {colours.error.name()};")

    def _output_ok(self) -> str:
        """What a schema or grammar that passed the check is good for: a remote endpoint checks its own."""
        fmt = self._params.output_format
        if self._params.endpoint() is not None and fmt in CHECKED_HERE:
            return f"{CHECKED[fmt]}; sent as `grammar` (serve takes it), a reply that does not follow it said"
        if self._params.endpoint() is not None:
            return "sent with each request: the endpoint checks it, and the pane says what it refuses"
        return CHECKED.get(fmt, "")

    def _load_output_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Load a JSON schema, a grammar or a regular expression",
            "",
            "Schema, grammar or expression (*.json *.gbnf *.lark *.regex);;All files (*)",
        )
        if not path:
            return
        try:
            with open(path, "rb") as f:
                text = f.read(LOADED_BYTES).decode("utf-8", "replace")
        except OSError as e:
            self.output_check.setText(f"✗ could not read {Path(path).name}: {e.strerror or e}")
            self.output_check.setStyleSheet(f"color: {theme.current().error.name()};")
            return
        fmt = LOADED_AS.get(Path(path).suffix.lower(), "schema")
        if fmt == "regex":
            text = text.rstrip("\r\n")  # the file's last line break is not part of the expression
        if self.output_combo.currentData() != fmt:
            self.output_combo.setCurrentIndex(self.output_combo.findData(fmt))
        self.output_edit.setPlainText(text)
        self._check_output()

    def _endpoint_rows(self, form: QFormLayout) -> dict[str, QLineEdit]:
        edits = {
            "remote_url": QLineEdit(placeholderText="local engine, or e.g. http://host:8080/v1"),
            "remote_model": QLineEdit(placeholderText="model name (the server's default if empty)"),
            "remote_api_key": QLineEdit(placeholderText="API key (optional)"),
        }
        edits["remote_api_key"].setEchoMode(QLineEdit.EchoMode.Password)
        for (name, edit), label in zip(edits.items(), ("Endpoint", "Model", "API key")):
            edit.editingFinished.connect(lambda name=name, edit=edit: self._update_endpoint(**{name: edit.text().strip()}))
            form.addRow(label, edit)
        self.api_combo = QComboBox()
        for label, api in (("Chat completions", "chat"), ("Responses", "responses")):
            self.api_combo.addItem(label, api)
        self.api_combo.setToolTip("The endpoint's API; Responses sends only each new turn after the last response's id")
        self.api_combo.currentIndexChanged.connect(lambda _: self._update_endpoint(remote_api=self.api_combo.currentData()))
        form.addRow("API", self.api_combo)
        self.key_warning = QLabel()
        self.key_warning.setWordWrap(True)
        self.key_warning.setStyleSheet(f"color: {theme.current().error.name()};")
        self.key_warning.hide()
        form.addRow("", self.key_warning)
        for name in ("remote_url", "remote_api_key"):
            edits[name].textChanged.connect(self._show_key_warning)  # as typed, before the edit is applied
        return edits

    def _update_endpoint(self, **changes) -> None:
        """A change of where the pane chats: the output format's check depends on it (a remote checks its own)."""
        self._update(**changes)
        if self._params.output_format in TYPED_FORMATS:
            self._check_output()

    def _show_key_warning(self) -> None:
        """Warn while the key would travel readable by anyone on the way: plain http, not to this machine."""
        url, key = (self.endpoint_edits[name].text().strip() for name in ("remote_url", "remote_api_key"))
        host = Endpoint(url, api_key=key).cleartext_host
        self.key_warning.setText(f"The API key is sent unencrypted over http to {host}." if host else "")
        self.key_warning.setVisible(host is not None)

    def _slider_row(self, spec: SliderSpec) -> QWidget:
        """The slider, its value (typed: any value of the knob's range, past the slider's span too),
        and under them why a typed value was refused."""
        slider = QSlider(Qt.Orientation.Horizontal)
        slider.setRange(0, spec.to_int(spec.hi))
        slider.valueChanged.connect(lambda pos, spec=spec: self._on_slider(spec, pos))
        slider.setToolTip(spec.tooltip)
        value = QLineEdit()
        value.setFixedWidth(VALUE_WIDTH)
        value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        value.setToolTip(f"{spec.label}: type a value from {BY_NAME[spec.name].lo:g} to {BY_NAME[spec.name].hi:g}")
        value.editingFinished.connect(lambda spec=spec: self._on_value_typed(spec))
        self.sliders[spec.name], self.values[spec.name] = slider, value
        row = QWidget()
        column = QVBoxLayout(row)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        line = QHBoxLayout()
        line.addWidget(slider, 1)
        line.addWidget(value)
        column.addLayout(line)
        column.addWidget(self._refusal_label(spec.name))
        return row

    def _refusal_label(self, name: str) -> QLabel:
        label = self._refusals[name] = QLabel()
        label.setWordWrap(True)
        label.setStyleSheet(f"color: {theme.current().error.name()};")
        label.hide()
        return label

    def _show_value(self, spec: SliderSpec) -> None:
        value = getattr(self._params, spec.name)
        self.values[spec.name].setText(str(value) if spec.whole else f"{value:.2f}")

    def _on_value_typed(self, spec: SliderSpec) -> None:
        """A typed value within the knob's range is taken (the slider shows it as near as it can);
        another is refused, saying why, and the value stays as it was."""
        if not self.values[spec.name].isModified():  # focus left it untouched: the value shown stays as it is
            return
        text = self.values[spec.name].text().strip()
        f = BY_NAME[spec.name]
        try:
            value = int(text) if spec.whole else float(text)
        except ValueError:
            value = text
        problem = f.problem(value)
        refusal = self._refusals[spec.name]
        if problem is not None:
            refusal.setText(f"✗ {problem}")
            refusal.show()
            self._show_value(spec)
            return
        refusal.hide()
        if value != getattr(self._params, spec.name):
            slider = self.sliders[spec.name]
            slider.blockSignals(True)
            slider.setValue(spec.to_int(value))
            slider.blockSignals(False)
            self._update(**{spec.name: value})
        self._show_value(spec)

    # -- the Advanced group ------------------------------------------------------------------

    def _advanced_rows(self, form: QFormLayout) -> None:
        """llama.cpp's other samplers, folded under a button that says how many are set."""
        self.advanced_button = QToolButton()
        self.advanced_button.setCheckable(True)
        self.advanced_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_button.setArrowType(Qt.ArrowType.RightArrow)
        self.advanced_button.setAutoRaise(True)
        self.advanced_button.setToolTip(
            "llama.cpp's other samplers: the penalties' window, DRY, XTC, top-nσ, typical-p, Mirostat,\n"
            "dynamic temperature, the logit bias and the order the samplers run in"
        )
        self.advanced_button.toggled.connect(self._show_advanced)
        form.addRow(self.advanced_button)
        self.advanced_group = QWidget()
        group = QFormLayout(self.advanced_group)
        group.setContentsMargins(8, 0, 0, 0)
        group.setVerticalSpacing(2)
        group.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # a narrow pane: labels above their sliders
        self.list_edits: dict[str, QLineEdit] = {}
        for f in ADVANCED_FIELDS:
            if f.slider is not None:
                spec = next(s for s in ADVANCED_SLIDERS if s.name == f.name)
                group.addRow(spec.label, self._slider_row(spec))
            elif f.items == "bias":
                self.bias_editor = BiasEditor()
                self.bias_editor.sigChanged.connect(lambda entries: self._update_advanced(logit_bias=entries))
                group.addRow(f.label, self.bias_editor)
            else:
                group.addRow(f.label, self._list_row(f))
            group.labelForField(group.itemAt(group.rowCount() - 1, QFormLayout.ItemRole.FieldRole).widget()).setToolTip(f.tooltip)
        self.reset_advanced_button = QPushButton(
            "Reset the advanced samplers", toolTip="Each of them back to llama.cpp's default"
        )
        self.reset_advanced_button.clicked.connect(self._reset_advanced)
        group.addRow("", self.reset_advanced_button)
        self.advanced_group.hide()
        form.addRow(self.advanced_group)

    def _list_row(self, f: SamplingField) -> QWidget:
        """A list knob typed in a line (the sampler order as names or llama.cpp's letters; DRY's
        breakers as a JSON list), and under it why a line was refused."""
        edit = self.list_edits[f.name] = QLineEdit(toolTip=f.tooltip)
        edit.editingFinished.connect(lambda f=f: self._on_list_typed(f))
        row = QWidget()
        column = QVBoxLayout(row)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(edit)
        column.addWidget(self._refusal_label(f.name))
        return row

    def _on_list_typed(self, f: SamplingField) -> None:
        edit, refusal = self.list_edits[f.name], self._refusals[f.name]
        if not edit.isModified():
            return
        try:
            value = _read_list(f, edit.text())
        except ValueError as e:
            refusal.setText(f"✗ {e}")
            refusal.show()
            return  # the text stays, to mend; the pane keeps the value it had
        refusal.hide()
        self._show_list(f, value)
        if value != getattr(self._params, f.name):
            self._update_advanced(**{f.name: value})

    def _show_list(self, f: SamplingField, value: tuple) -> None:
        edit = self.list_edits[f.name]
        edit.setText(_list_text(f, value))
        edit.setCursorPosition(0)  # its start in view: the first sampler, the first breaker

    def _show_advanced(self, shown: bool) -> None:
        self.advanced_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.advanced_group.setVisible(shown)

    def _show_advanced_count(self) -> None:
        changed = sum(getattr(self._params, f.name) != getattr(DEFAULTS, f.name) for f in ADVANCED_FIELDS)
        self.advanced_button.setText(f"Advanced samplers ({changed} set)" if changed else "Advanced samplers")

    def _update_advanced(self, **changes) -> None:
        self._update(**changes)
        self._show_advanced_count()

    def _reset_advanced(self) -> None:
        self.set_params(self._params.with_(**{f.name: getattr(DEFAULTS, f.name) for f in ADVANCED_FIELDS}))

    def _apply_preset(self, preset: Preset, to_all: bool) -> None:
        if to_all:
            self.sigPresetToAll.emit(preset)  # the workspace sets every pane, this one with them
        else:
            self.set_params(preset.applied_to(self._params))

    def set_presets(self, book: PresetBook) -> None:
        self.preset_row.set_book(book)

    def set_token_reader(self, reader: TokenReader | None, model: str | None = None) -> None:
        """What turns a logit bias's text into tokens: the pane's local model; None for a remote endpoint."""
        self.bias_editor.set_reader(reader, model)

    def _update(self, **changes) -> None:
        self._params = self._params.with_(**changes)
        self.sigParamsChanged.emit(self._params)

    def _on_slider(self, spec: SliderSpec, position: int) -> None:
        self._update(**{spec.name: spec.to_value(position)})
        self._show_value(spec)
        self._refusals[spec.name].hide()
        if BY_NAME[spec.name].advanced:
            self._show_advanced_count()

    def _on_switch(self, name: str, on: bool) -> None:
        self._update(**{name: on})
        if name == "think":
            self.budget_spin.setEnabled(on)  # a budget means something only while the model thinks

    def _on_seed(self) -> None:
        text = self.seed_edit.text().strip()
        self._update(seed=int(text) if text else None)

    def _on_system(self) -> None:
        self._update(system_prompt=self.system_edit.toPlainText())


def _list_text(f: SamplingField, value: tuple) -> str:
    """A list knob as its line shows it: names with commas, texts as a JSON list."""
    return ", ".join(value) if f.items == "name" else f.to_text(value)


def _read_list(f: SamplingField, text: str) -> tuple:
    """A list knob's line: names (with commas or spaces, or llama.cpp's letters); texts as a JSON list."""
    if f.items != "name":
        return f.from_text(text)
    words = [w for w in re.split(r"[,\s]+", text.strip()) if w]
    names = {*f.choices, *dict(f.aliases)}
    return f.from_json(words[0] if len(words) == 1 and words[0] not in names else words)
