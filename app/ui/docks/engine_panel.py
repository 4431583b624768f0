"""The engine panel: model file and its facts, capacity/context/batch/threads and llama.cpp's settings
(GPU layers, flash attention, KV cache types and layout, KV reuse and its RAM cache, mlock/mmap,
backend sampling, speculative decoding and its draft lengths), what the build runs on and where the model went, Apply; and, live, batched/static/sequential
serving (and the static batch's window), the scheduling policy and the adaptive batch; the KV layout the
engine runs now, and why (refreshed by the window's tick). Labels and tooltips come from config_fields.py."""

from __future__ import annotations

import os
from html import escape

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.config_fields import FIELDS
from app.engine.errors import EngineError
from app.engine.kv.pool import format_bytes
from app.engine.params import EngineConfig, Policy, ServingMode, SpecType
from app.engine.stats import EngineSnapshot
from app.ui import theme
from app.workspace.workspace import MAX_PANES

ITL_TARGET_RANGE_MS = (20, 1000)
DEFAULT_ITL_TARGET_MS = 150
KV_LAYOUTS = {"auto": "automatic", "on": "one pool (-kvu)", "off": "a stream per sequence"}
NBSP = "\u00a0"
SPEC_DRAFT_MOST = 256  # tokens a draft may be at most set to (llama.cpp's default 16)


def layout_line(snapshot: EngineSnapshot) -> str:
    """The KV layout the engine runs now and why, and what changing it while chats ran cost:
    "one pool (automatic: …) · changed 2 times, 0.31 s", the changes in non-breaking spaces: one
    piece when the line wraps."""
    n = snapshot.layout_changes
    if not n:
        return snapshot.kv_layout
    changes = f"changed {n} time{'' if n == 1 else 's'}, {snapshot.layout_change_s:.2f} s"
    return f"{snapshot.kv_layout} · {changes.replace(' ', NBSP)}"


def _spin(lo: int, hi: int, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    return box


def _explained(widget: QWidget, name: str) -> QWidget:
    """`widget` edits the setting `name`: its tooltip, the flag and its help, from the table."""
    widget.setToolTip(FIELDS[name].tooltip)
    return widget


def _label(name: str) -> QLabel:
    return _explained(QLabel(FIELDS[name].label), name)


def _row(*widgets: tuple[QWidget, int]) -> QWidget:
    """Widgets side by side, each with its stretch."""
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget, stretch in widgets:
        layout.addWidget(widget, stretch)
    return row


def _add(form: QFormLayout, name: str, widget: QWidget) -> None:
    """A row for the setting `name`, labelled and explained from the table."""
    form.addRow(_label(name), _explained(widget, name))


def _fill(combo: QComboBox, name: str, labels: dict[str, str] | None = None) -> QComboBox:
    """The setting's words as items (each shown as `labels` says, else as itself)."""
    for word in FIELDS[name].text.choices:
        combo.addItem((labels or {}).get(word, word), word)
    return combo


def _choose(combo: QComboBox, name: str, value) -> None:
    combo.setCurrentIndex(combo.findData(FIELDS[name].text.format(value)))


def _chosen(combo: QComboBox, name: str):
    return FIELDS[name].text.parse(combo.currentData())


def _pick_gguf(parent: QWidget, title: str, field: QLineEdit) -> None:
    """A file dialog for a GGUF file, opening where `field`'s file is; the pick goes into `field`."""
    path, _ = QFileDialog.getOpenFileName(parent, title, os.path.dirname(field.text()), "GGUF models (*.gguf);;All files (*)")
    if path:
        field.setText(path)


class EnginePanel(QWidget):
    """Edits an EngineConfig; Apply reloads the client (chats stay, replies in flight get a notice)."""

    sigConfigApplied = Signal(object)  # EngineConfig, after a successful reload
    sigLiveChanged = Signal(object)  # EngineConfig, after a change that needs no reload

    def __init__(self, client: EngineClient, parent=None):
        super().__init__(parent)
        self.client = client
        self.template_for = lambda _model_path: None  # the window's: a model's own template file, kept in the settings
        self.error_box: QMessageBox | None = None
        self.last_error = ""
        body = QWidget()
        form = QFormLayout(body)
        form.setContentsMargins(6, 6, 6, 6)
        _add(form, "model_path", self._model_row())
        _add(form, "chat_template_file", self._template_row())
        self.model_facts = QLabel()
        self.model_facts.setWordWrap(True)
        form.addRow("", self.model_facts)
        self.capacity = _spin(1, MAX_PANES)
        self.n_ctx = _spin(0, 1 << 20, 512)
        self.n_ctx.setSpecialValueText("automatic")  # 0: sized from the model, the panes and the free memory
        self.n_batch = _spin(8, 4096, 64)
        self.n_ubatch = _spin(8, 4096, 64)
        self.n_threads = _spin(1, os.cpu_count() or 64)
        self.n_threads_batch = _spin(0, os.cpu_count() or 64)
        self.n_threads_batch.setSpecialValueText("as decoding")  # 0: the decode thread count
        for name in ("capacity", "n_ctx", "n_batch", "n_ubatch", "n_threads", "n_threads_batch"):
            _add(form, name, getattr(self, name))
        self._llama_rows(form)
        self.overflow = QComboBox()
        _fill(self.overflow, "overflow", {"stop": "stop with a message", "truncate": "drop the oldest turns"})
        _add(form, "overflow", self.overflow)
        self.apply_button = QPushButton("Apply (reload)", clicked=self.apply)
        form.addRow("", self.apply_button)
        _add(form, "mode", self._mode_row())
        self.static_window = _spin(0, 1000, 10)
        self.static_window.setSuffix(" ms")
        self.static_window.valueChanged.connect(self._on_static_window)
        _add(form, "static_window_ms", self.static_window)
        self.policy = _fill(QComboBox(), "policy")
        self.policy.currentIndexChanged.connect(self._on_policy)
        _add(form, "policy", self.policy)
        _add(form, "itl_target_ms", self._adaptive_row())
        self.status = QLabel()
        self.status.setWordWrap(True)
        form.addRow("", self.status)
        self._layout_shown: tuple | None = None  # the snapshot's layout figures the facts show
        self.show_config(client.config)
        self.body = body
        self._scrolled(body)

    def _scrolled(self, body: QWidget) -> None:
        """The settings in a scroll area: on a short screen they scroll rather than push the window past
        it; as wide as they need, so they never scroll sideways."""
        area = self.scroll_area = QScrollArea()
        area.setWidgetResizable(True)
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        area.setWidget(body)
        bar = area.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        area.setMinimumWidth(body.minimumSizeHint().width() + bar)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(area)

    def sizeHint(self) -> QSize:
        """All of the settings, where there is room (a scroll area alone would ask for a part of them)."""
        bar = self.scroll_area.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        body = self.body.sizeHint()
        return QSize(max(self.scroll_area.minimumWidth(), body.width() + bar), body.height())

    def _llama_rows(self, form: QFormLayout) -> None:
        """llama.cpp's own settings, with its names: -ngl, -mg, -fa, -ctk/-ctv, -kvu, --mlock, --no-mmap;
        the KV cache's reuse and RAM tier (llama-server's --cache-ram), --backend-sampling, and
        speculative decoding (--spec-type, --spec-draft-n-max/-min, -md, --spec-draft-p-min)."""
        self.gpu_layers = QLineEdit(placeholderText="automatic")
        self.main_gpu = _spin(0, 15)
        main_gpu = (_label("main_gpu"), 0), (_explained(self.main_gpu, "main_gpu"), 0)
        form.addRow(_label("gpu_layers"), _row((_explained(self.gpu_layers, "gpu_layers"), 1), *main_gpu))
        self.flash_attn = _fill(QComboBox(), "flash_attn")
        _add(form, "flash_attn", self.flash_attn)
        self.cache_type_k = _fill(QComboBox(), "cache_type_k")
        self.cache_type_v = _fill(QComboBox(), "cache_type_v")
        v_cache = (_label("cache_type_v"), 0), (_explained(self.cache_type_v, "cache_type_v"), 1)
        form.addRow(_label("cache_type_k"), _row((_explained(self.cache_type_k, "cache_type_k"), 1), *v_cache))
        self.kv_unified = _fill(QComboBox(), "kv_unified", KV_LAYOUTS)
        _add(form, "kv_unified", self.kv_unified)
        self.kv_reuse = QCheckBox()
        self.cache_ram_mib = _spin(0, 1 << 20, 1024)
        self.cache_ram_mib.setSuffix(" MiB")
        self.cache_ram_mib.setSpecialValueText("none")  # 0: evicted cells are dropped
        self.kv_reuse.toggled.connect(self.cache_ram_mib.setEnabled)  # only reused cells are kept in RAM
        ram = (_label("cache_ram_mib"), 0), (_explained(self.cache_ram_mib, "cache_ram_mib"), 1)
        form.addRow(_label("kv_reuse"), _row((_explained(self.kv_reuse, "kv_reuse"), 0), *ram))
        self.use_mlock = _explained(QCheckBox(FIELDS["use_mlock"].label), "use_mlock")
        self.use_mmap = _explained(QCheckBox(FIELDS["use_mmap"].label), "use_mmap")
        form.addRow("Model memory", _row((self.use_mlock, 0), (self.use_mmap, 0), (QWidget(), 1)))
        self.backend_sampling = _explained(QCheckBox(), "backend_sampling")
        form.addRow(_label("backend_sampling"), _row((self.backend_sampling, 0), (QWidget(), 1)))  # not stretched
        self.spec_type = _fill(QComboBox(), "spec_type")
        self.spec_type.currentIndexChanged.connect(self._show_spec)
        _add(form, "spec_type", self.spec_type)
        self.spec_draft_n_max = _spin(1, SPEC_DRAFT_MOST)
        self.spec_draft_n_min = _spin(0, SPEC_DRAFT_MOST)
        self.spec_draft_n_max.valueChanged.connect(self.spec_draft_n_min.setMaximum)  # the fewest never above the most
        _add(form, "spec_draft_n_max", self.spec_draft_n_max)
        _add(form, "spec_draft_n_min", self.spec_draft_n_min)
        self.spec_draft_model = QLineEdit(placeholderText="a small GGUF with this model's vocabulary")
        pick = QToolButton(text="…", toolTip="Pick the draft model's GGUF file", clicked=self._browse_draft)
        form.addRow(_label("spec_draft_model"), _row((_explained(self.spec_draft_model, "spec_draft_model"), 1), (pick, 0)))
        self.spec_draft_p_min = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=1.0, singleStep=0.05)
        _add(form, "spec_draft_p_min", self.spec_draft_p_min)
        self.mmproj = QLineEdit(placeholderText="auto: an mmproj-*.gguf beside the model; none: no images")
        pick = QToolButton(text="…", toolTip="Pick the model's vision projector (an mmproj GGUF)", clicked=self._browse_mmproj)
        form.addRow(_label("mmproj"), _row((_explained(self.mmproj, "mmproj"), 1), (pick, 0)))

    def _model_row(self) -> QWidget:
        self.model_path = QLineEdit()
        self.model_path.editingFinished.connect(self._show_template_of_model)
        browse = QToolButton(text="…", toolTip="Pick a GGUF model file", clicked=self._browse)
        return _row((self.model_path, 1), (browse, 0))

    def _template_row(self) -> QWidget:
        """A .jinja file instead of the model's own chat template; cleared (its ✕): the model's own."""
        self.chat_template_file = QLineEdit(placeholderText="the model's own")
        self.chat_template_file.setClearButtonEnabled(True)
        pick = QToolButton(text="…", toolTip="Pick a Jinja chat template file", clicked=self._browse_template)
        return _row((self.chat_template_file, 1), (pick, 0))

    def _show_template_of_model(self) -> None:
        """Another model typed or picked: the template file kept for it, or its own."""
        if self.model_path.text().strip() != self.client.config.model_path:
            self.chat_template_file.setText(self.template_for(self.model_path.text().strip()) or "")

    def _mode_row(self) -> QWidget:
        self.batched = QRadioButton("Continuous", toolTip="Continuous batching: every step refills the batch")
        self.static = QRadioButton("Static", toolTip="Static batching: a batch runs until its last reply ends")
        self.sequential = QRadioButton("Sequential", toolTip="One request at a time")
        self.mode_buttons = {
            ServingMode.BATCHED: self.batched,
            ServingMode.STATIC: self.static,
            ServingMode.SEQUENTIAL: self.sequential,
        }
        row = _row(*((button, 0) for button in self.mode_buttons.values()))
        group = QButtonGroup(row)
        for button in self.mode_buttons.values():
            group.addButton(button)
            button.toggled.connect(self._on_mode_toggled)
        return row

    def _adaptive_row(self) -> QWidget:
        self.adaptive = QCheckBox()
        self.itl_target = QSlider(Qt.Orientation.Horizontal)
        self.itl_target.setRange(*ITL_TARGET_RANGE_MS)
        self.itl_target.setSingleStep(10)
        self.itl_target_label = QLabel()
        self.itl_target_label.setMinimumWidth(52)
        self.adaptive.toggled.connect(self._on_adaptive)
        self.itl_target.valueChanged.connect(self._on_adaptive)
        return _row((self.adaptive, 0), (self.itl_target, 1), (self.itl_target_label, 0))

    def show_config(self, config: EngineConfig) -> None:
        self.model_path.setText(config.model_path)
        self.chat_template_file.setText(config.chat_template_file or "")
        self.capacity.setValue(config.capacity)
        self.n_ctx.setValue(config.n_ctx)
        self.n_batch.setValue(config.n_batch)
        self.n_ubatch.setValue(config.n_ubatch)
        self.n_threads.setValue(config.n_threads)
        self.n_threads_batch.setValue(config.n_threads_batch or 0)
        self.gpu_layers.setText("" if config.gpu_layers is None else FIELDS["gpu_layers"].text.format(config.gpu_layers))
        self.main_gpu.setValue(config.main_gpu)
        for name in ("flash_attn", "cache_type_k", "cache_type_v", "kv_unified", "spec_type", "overflow"):
            _choose(getattr(self, name), name, getattr(config, name))
        self.kv_reuse.setChecked(config.kv_reuse)
        self.cache_ram_mib.setValue(config.cache_ram_mib)
        self.cache_ram_mib.setEnabled(config.kv_reuse)
        for name in ("use_mlock", "use_mmap", "backend_sampling"):
            getattr(self, name).setChecked(getattr(config, name))
        self.spec_draft_n_max.setValue(config.spec_draft_n_max)  # first: it bounds the fewest
        self.spec_draft_n_min.setValue(config.spec_draft_n_min)
        self.spec_draft_model.setText(config.spec_draft_model or "")
        self.spec_draft_p_min.setValue(config.spec_draft_p_min)
        self.mmproj.setText(config.mmproj or "")
        self._show_spec()
        for button in self.mode_buttons.values():
            button.blockSignals(True)
        self.mode_buttons[config.mode].setChecked(True)
        self.static_window.blockSignals(True)
        self.static_window.setValue(round(config.static_window_ms))
        for button in (*self.mode_buttons.values(), self.static_window):
            button.blockSignals(False)
        for widget in (self.policy, self.adaptive, self.itl_target):
            widget.blockSignals(True)
        self.policy.setCurrentIndex(self.policy.findData(config.policy.value))
        self.adaptive.setChecked(config.itl_target_ms is not None)
        self.itl_target.setValue(round(config.itl_target_ms or DEFAULT_ITL_TARGET_MS))
        for widget in (self.policy, self.adaptive, self.itl_target):
            widget.blockSignals(False)
        self._show_itl_target()
        self.show_model_facts()

    def show_model_facts(self) -> None:
        info, snapshot = self.client.model_info, self.client.snapshot
        self._layout_shown = _layout_figures(snapshot)
        if info is None:
            self.model_facts.setText("not loaded")
            return
        size = f"{info.size_bytes / 1e6:.0f} MB"
        layout = info.kv_layout if snapshot is None or not snapshot.kv_layout else layout_line(snapshot)
        lines = [
            f"<b>{escape(info.name)}</b>",
            f"{escape(info.description)} · {size} · trained context {info.n_ctx_train}",
            f"KV pool: {info.n_ctx} cells, {format_bytes(info.kv_bytes)} ({escape(info.pool_reason)})",
            f"KV layout: {escape(layout).replace(NBSP, '&nbsp;')}",  # rich text takes U+00A0 for a space
            f"Step size: {escape(snapshot.step_size if snapshot is not None and snapshot.step_size else 'no step yet')}",
            escape(info.placement()),
        ]
        config = self.client.config
        if config.spec_type is SpecType.DRAFT and config.spec_draft_model and not info.drafts_refused:
            lines.append(f"Drafting with {escape(os.path.basename(config.spec_draft_model))} (speculative decoding)")
        if info.sees_images:
            lines.append(f"Sees images: projector {escape(os.path.basename(info.projector))}; {escape(info.image_decode)}")
        if info.chat_template_file:
            lines.append(f"Chat template: {escape(os.path.basename(info.chat_template_file))}, instead of the model's own")
        if info.build is not None:
            lines.append(f"Build: {escape(info.build.summary())}")
            self.gpu_layers.setPlaceholderText("automatic: all" if info.build.gpu_offload else "automatic: 0 (CPU-only build)")
        notice = theme.current().notice.name()
        lines += [f'<span style="color:{notice};">{escape(text)}</span>' for text in info.notices]
        self.model_facts.setText("<br>".join(lines))

    def refresh_layout(self) -> None:
        """Show the KV layout and the step size the engine runs now: the facts are written again only
        when one of them moved, else a tick costs one comparison."""
        if _layout_figures(self.client.snapshot) != self._layout_shown:
            self.show_model_facts()

    def set_min_capacity(self, panes: int) -> None:
        """The engine must hold a sequence for every open pane."""
        self.capacity.setMinimum(max(1, panes))

    def edited_config(self) -> EngineConfig:
        """The settings as edited; ValueError with a one-line reason for what llama.cpp cannot take."""
        config = self.client.config.with_(
            model_path=self.model_path.text().strip(),
            chat_template_file=FIELDS["chat_template_file"].text.parse(self.chat_template_file.text()),
            capacity=self.capacity.value(),
            n_ctx=self.n_ctx.value(),
            n_batch=max(self.n_batch.value(), self.capacity.value()),
            n_ubatch=self.n_ubatch.value(),
            n_threads=self.n_threads.value(),
            n_threads_batch=self.n_threads_batch.value() or None,
            gpu_layers=self._gpu_layers(),
            main_gpu=self.main_gpu.value(),
            flash_attn=_chosen(self.flash_attn, "flash_attn"),
            cache_type_k=_chosen(self.cache_type_k, "cache_type_k"),
            cache_type_v=_chosen(self.cache_type_v, "cache_type_v"),
            kv_unified=_chosen(self.kv_unified, "kv_unified"),
            kv_reuse=self.kv_reuse.isChecked(),
            cache_ram_mib=self.cache_ram_mib.value(),
            use_mlock=self.use_mlock.isChecked(),
            use_mmap=self.use_mmap.isChecked(),
            backend_sampling=self.backend_sampling.isChecked(),
            spec_type=_chosen(self.spec_type, "spec_type"),
            spec_draft_n_max=self.spec_draft_n_max.value(),
            spec_draft_n_min=self.spec_draft_n_min.value(),
            spec_draft_model=FIELDS["spec_draft_model"].text.parse(self.spec_draft_model.text()),
            spec_draft_p_min=self.spec_draft_p_min.value(),
            overflow=_chosen(self.overflow, "overflow"),
            mmproj=FIELDS["mmproj"].text.parse(self.mmproj.text()),
        )
        before = self.client.config
        if config.model_path != before.model_path and config.mmproj == before.mmproj:
            # a projector named for the model before is not this one's: it finds its own beside it
            config = config.with_(mmproj=before.for_other_model(config.model_path).mmproj)
        problem = config.problem()
        if problem:
            raise ValueError(problem)
        return config

    def _gpu_layers(self) -> int | None:
        """The GPU layers field: empty for automatic, all, or a number of layers."""
        try:
            return FIELDS["gpu_layers"].text.parse(self.gpu_layers.text() or "auto")
        except ValueError as e:
            raise ValueError(f"{FIELDS['gpu_layers'].label}: {e}") from None

    def _browse(self) -> None:
        _pick_gguf(self, "Pick a GGUF model", self.model_path)
        self._show_template_of_model()

    def _browse_template(self) -> None:
        start = os.path.dirname(self.chat_template_file.text()) or os.path.dirname(self.model_path.text())
        path, _ = QFileDialog.getOpenFileName(
            self, "Pick a chat template", start, "Jinja chat templates (*.jinja *.j2 *.txt);;All files (*)"
        )
        if path:
            self.chat_template_file.setText(path)

    def _browse_mmproj(self) -> None:
        _pick_gguf(self, "Pick the model's vision projector (an mmproj GGUF)", self.mmproj)

    def _browse_draft(self) -> None:
        _pick_gguf(self, "Pick a draft model (a small GGUF with this model's vocabulary)", self.spec_draft_model)

    @asyncSlot()
    async def apply(self) -> None:
        try:
            config = self.edited_config()
        except ValueError as e:
            self._show_error(str(e), loaded=False)
            return
        await self.reload(config)

    async def reload(self, config: EngineConfig) -> str:
        """Reload the client on `config`; on failure a dialog, the previous model stays and the
        reason is returned."""
        self.apply_button.setEnabled(False)
        self.status.setText("loading…")
        try:
            await self.client.reload(config)
        except (EngineError, ValueError, OSError) as e:
            self._show_error(str(e))
            self.show_config(self.client.config)  # what is still running
            return str(e)
        finally:
            self.apply_button.setEnabled(True)
        self.status.setText("reloaded")
        self.show_model_facts()
        self.sigConfigApplied.emit(config)
        return ""

    def _show_error(self, reason: str, loaded: bool = True) -> None:
        """A non-blocking dialog (tests and the event loop go on) plus the reason in the panel;
        `loaded`: a reload was tried (else the settings were refused before it)."""
        self.last_error = reason
        title = "The model could not be loaded" if loaded else "These settings cannot be used"
        self.status.setText(_error_html(f"Kept the previous model: {escape(reason)}"))
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, reason, parent=self)
        self.error_box.setInformativeText("The previous model is still loaded.")
        self.error_box.open()

    def _on_mode_toggled(self, checked: bool) -> None:
        if checked:  # the button left toggles too
            self._on_mode()

    @asyncSlot()
    async def _on_mode(self) -> None:
        mode = next(mode for mode, button in self.mode_buttons.items() if button.isChecked())
        await self._live(self.client.set_mode(mode))

    @asyncSlot()
    async def _on_static_window(self) -> None:
        await self._live(self.client.set_static_window(float(self.static_window.value())))

    @asyncSlot()
    async def _on_policy(self) -> None:
        await self._live(self.client.set_policy(Policy(self.policy.currentData())))

    @asyncSlot()
    async def _on_adaptive(self) -> None:
        self._show_itl_target()
        await self._live(self.client.set_itl_target(self.itl_target.value() if self.adaptive.isChecked() else None))

    async def _live(self, change) -> None:
        """Apply a change without a reload; with the engine stopped, say so and show what still holds."""
        try:
            await change
        except EngineError as e:
            self.show_config(self.client.config)
            self.status.setText(_error_html(f"Not applied, the engine has stopped: {escape(str(e))}"))
            return
        self.sigLiveChanged.emit(self.client.config)

    def _show_spec(self) -> None:
        """The draft lengths are for drafting: greyed while speculative decoding is off."""
        kind = _chosen(self.spec_type, "spec_type")
        self.spec_draft_n_max.setEnabled(kind is not SpecType.NONE)
        self.spec_draft_n_min.setEnabled(kind is not SpecType.NONE)
        self.spec_draft_model.setEnabled(kind is SpecType.DRAFT)
        self.spec_draft_p_min.setEnabled(kind is SpecType.DRAFT)

    def _show_itl_target(self) -> None:
        self.itl_target.setEnabled(self.adaptive.isChecked())
        self.itl_target_label.setText(f"{self.itl_target.value()} ms" if self.adaptive.isChecked() else "off")


def _layout_figures(snapshot: EngineSnapshot | None) -> tuple | None:
    return None if snapshot is None else (snapshot.kv_layout, snapshot.layout_changes, snapshot.step_size)


def _error_html(text: str) -> str:
    return f'<span style="color:{theme.current().error.name()};">{text}</span>'
