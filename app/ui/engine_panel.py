"""The engine panel: model file and its facts, capacity/context/batch/threads and llama.cpp's settings
(GPU layers, flash attention, KV cache types, mlock/mmap), what the build runs on and where the model
went, Apply; and, live, batched/sequential serving, the scheduling policy and the adaptive batch."""

from __future__ import annotations

import os
from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QRadioButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QWidget,
)
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.errors import EngineError
from app.engine.params import (
    GPU_LAYERS_ALL,
    KV_UNIFIED,
    CacheType,
    EngineConfig,
    FlashAttn,
    OverflowPolicy,
    Policy,
    ServingMode,
    kv_unified_name,
)
from app.engine.pool import format_bytes

from . import theme
from .settings import MAX_PANES

ITL_TARGET_RANGE_MS = (20, 1000)
DEFAULT_ITL_TARGET_MS = 150
KV_LAYOUTS = {"auto": "automatic", "on": "one pool (-kvu)", "off": "a stream per sequence"}
KV_LAYOUT_HELP = (
    "llama.cpp's -kvu. One pool: chats share all the cells, so one may grow long.\n"
    "A stream per sequence: each chat has context / capacity cells and decodes faster on long chats.\n"
    "Automatic: streams when each holds a long chat."
)
POLICY_HELP = "\n".join(f"{p.value}: {p.help}" for p in Policy)


def _spin(lo: int, hi: int, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    return box


class EnginePanel(QWidget):
    """Edits an EngineConfig; Apply reloads the client (chats stay, replies in flight get a notice)."""

    sigConfigApplied = Signal(object)  # EngineConfig, after a successful reload
    sigLiveChanged = Signal(object)  # EngineConfig, after a change that needs no reload

    def __init__(self, client: EngineClient, parent=None):
        super().__init__(parent)
        self.client = client
        self.error_box: QMessageBox | None = None
        self.last_error = ""
        form = QFormLayout(self)
        form.setContentsMargins(6, 6, 6, 6)
        form.addRow("Model", self._model_row())
        self.model_facts = QLabel()
        self.model_facts.setWordWrap(True)
        form.addRow("", self.model_facts)
        self.capacity = _spin(1, MAX_PANES)
        self.n_ctx = _spin(0, 1 << 20, 512)
        self.n_ctx.setSpecialValueText("automatic")  # 0: sized from the model, the panes and the free memory
        self.n_batch = _spin(8, 4096, 64)
        self.n_threads = _spin(1, os.cpu_count() or 64)
        form.addRow("Parallel capacity", self.capacity)
        form.addRow("Context (KV cells)", self.n_ctx)
        form.addRow("Batch size", self.n_batch)
        form.addRow("Threads", self.n_threads)
        self.n_threads_batch = _spin(0, os.cpu_count() or 64)
        self.n_threads_batch.setSpecialValueText("as decoding")  # 0: the decode thread count
        form.addRow("Prompt threads", self.n_threads_batch)
        self._llama_rows(form)
        self.overflow = QComboBox()
        self.overflow.addItem("stop with a message", OverflowPolicy.STOP.value)  # Qt keeps the plain string
        self.overflow.addItem("drop the oldest turns", OverflowPolicy.TRUNCATE.value)
        form.addRow("Chat too long", self.overflow)
        self.apply_button = QPushButton("Apply (reload)", clicked=self.apply)
        form.addRow("", self.apply_button)
        form.addRow("Serving", self._mode_row())
        self.policy = QComboBox()
        for policy in Policy:
            self.policy.addItem(policy.value, policy.value)
        self.policy.setToolTip(POLICY_HELP)
        self.policy.currentIndexChanged.connect(self._on_policy)
        form.addRow("Scheduling", self.policy)
        form.addRow("Adaptive batch", self._adaptive_row())
        self.status = QLabel()
        self.status.setWordWrap(True)
        form.addRow("", self.status)
        self.show_config(client.config)

    def _llama_rows(self, form: QFormLayout) -> None:
        """llama.cpp's own settings, with its names: -ngl, -mg, -fa, -ctk/-ctv, --mlock, --no-mmap."""
        self.gpu_layers = QLineEdit(placeholderText="automatic", toolTip="A number of layers, or all (llama.cpp's -ngl)")
        self.main_gpu = _spin(0, 15)
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.gpu_layers, 1)
        layout.addWidget(QLabel("main GPU"))
        layout.addWidget(self.main_gpu)
        form.addRow("GPU layers", row)
        self.flash_attn = QComboBox(toolTip="llama.cpp's -fa; a quantized V cache needs it")
        for value in FlashAttn:
            self.flash_attn.addItem(value.value, value.value)
        form.addRow("Flash attention", self.flash_attn)
        self.cache_type_k, self.cache_type_v = QComboBox(), QComboBox()
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        for label, box in (("K", self.cache_type_k), ("V", self.cache_type_v)):
            for value in CacheType:
                box.addItem(value.value, value.value)
            layout.addWidget(QLabel(label))
            layout.addWidget(box, 1)
        form.addRow("KV cache type", row)
        self.kv_unified = QComboBox(toolTip=KV_LAYOUT_HELP)
        for name, label in KV_LAYOUTS.items():
            self.kv_unified.addItem(label, name)
        form.addRow("KV layout", self.kv_unified)
        self.use_mlock = QCheckBox("mlock", toolTip="Keep the model in RAM: never swapped out")
        self.use_mmap = QCheckBox("mmap", toolTip="Map the model file instead of reading it into memory")
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.use_mlock)
        layout.addWidget(self.use_mmap)
        layout.addStretch(1)
        form.addRow("Model memory", row)

    def _model_row(self) -> QWidget:
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.model_path = QLineEdit()
        browse = QToolButton(text="…", toolTip="Pick a GGUF model file", clicked=self._browse)
        layout.addWidget(self.model_path, 1)
        layout.addWidget(browse)
        return row

    def _mode_row(self) -> QWidget:
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.batched = QRadioButton("Batched")
        self.sequential = QRadioButton("Sequential")
        group = QButtonGroup(row)
        for button in (self.batched, self.sequential):
            group.addButton(button)
            layout.addWidget(button)
        self.batched.toggled.connect(self._on_mode)
        return row

    def _adaptive_row(self) -> QWidget:
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.adaptive = QCheckBox(toolTip="Tune the batch to keep the inter-token latency under the target")
        self.itl_target = QSlider(Qt.Orientation.Horizontal)
        self.itl_target.setRange(*ITL_TARGET_RANGE_MS)
        self.itl_target.setSingleStep(10)
        self.itl_target_label = QLabel()
        self.itl_target_label.setMinimumWidth(52)
        self.adaptive.toggled.connect(self._on_adaptive)
        self.itl_target.valueChanged.connect(self._on_adaptive)
        layout.addWidget(self.adaptive)
        layout.addWidget(self.itl_target, 1)
        layout.addWidget(self.itl_target_label)
        return row

    def show_config(self, config: EngineConfig) -> None:
        self.model_path.setText(config.model_path)
        self.capacity.setValue(config.capacity)
        self.n_ctx.setValue(config.n_ctx)
        self.n_batch.setValue(config.n_batch)
        self.n_threads.setValue(config.n_threads)
        self.n_threads_batch.setValue(config.n_threads_batch or 0)
        layers = config.gpu_layers
        self.gpu_layers.setText("" if layers is None else "all" if layers == GPU_LAYERS_ALL else str(layers))
        self.main_gpu.setValue(config.main_gpu)
        self.flash_attn.setCurrentIndex(self.flash_attn.findData(config.flash_attn.value))
        self.cache_type_k.setCurrentIndex(self.cache_type_k.findData(config.cache_type_k.value))
        self.cache_type_v.setCurrentIndex(self.cache_type_v.findData(config.cache_type_v.value))
        self.use_mlock.setChecked(config.use_mlock)
        self.use_mmap.setChecked(config.use_mmap)
        self.kv_unified.setCurrentIndex(self.kv_unified.findData(kv_unified_name(config.kv_unified)))
        self.overflow.setCurrentIndex(self.overflow.findData(config.overflow.value))
        button = self.batched if config.mode is ServingMode.BATCHED else self.sequential
        button.blockSignals(True)
        button.setChecked(True)
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
        info = self.client.model_info
        if info is None:
            self.model_facts.setText("not loaded")
            return
        size = f"{info.size_bytes / 1e6:.0f} MB"
        lines = [
            f"<b>{escape(info.name)}</b>",
            f"{escape(info.description)} · {size} · trained context {info.n_ctx_train}",
            f"KV pool: {info.n_ctx} cells, {format_bytes(info.kv_bytes)} ({escape(info.pool_reason)})",
            f"KV layout: {escape(info.kv_layout)}",
            escape(info.placement()),
        ]
        if info.build is not None:
            lines.append(f"Build: {escape(info.build.summary())}")
            self.gpu_layers.setPlaceholderText("automatic: all" if info.build.gpu_offload else "automatic: 0 (CPU-only build)")
        notice = theme.current().notice.name()
        lines += [f'<span style="color:{notice};">{escape(text)}</span>' for text in info.notices]
        self.model_facts.setText("<br>".join(lines))

    def set_min_capacity(self, panes: int) -> None:
        """The engine must hold a sequence for every open pane."""
        self.capacity.setMinimum(max(1, panes))

    def edited_config(self) -> EngineConfig:
        """The settings as edited; ValueError with a one-line reason for what llama.cpp cannot take."""
        config = self.client.config.with_(
            model_path=self.model_path.text().strip(),
            capacity=self.capacity.value(),
            n_ctx=self.n_ctx.value(),
            n_batch=max(self.n_batch.value(), self.capacity.value()),
            n_threads=self.n_threads.value(),
            n_threads_batch=self.n_threads_batch.value() or None,
            gpu_layers=_gpu_layers(self.gpu_layers.text()),
            main_gpu=self.main_gpu.value(),
            flash_attn=FlashAttn(self.flash_attn.currentData()),
            cache_type_k=CacheType(self.cache_type_k.currentData()),
            cache_type_v=CacheType(self.cache_type_v.currentData()),
            use_mlock=self.use_mlock.isChecked(),
            use_mmap=self.use_mmap.isChecked(),
            kv_unified=KV_UNIFIED[self.kv_unified.currentData()],
            overflow=OverflowPolicy(self.overflow.currentData()),
        )
        problem = config.problem()
        if problem:
            raise ValueError(problem)
        return config

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Pick a GGUF model", os.path.dirname(self.model_path.text()), "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.model_path.setText(path)

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

    @asyncSlot()
    async def _on_mode(self) -> None:
        mode = ServingMode.BATCHED if self.batched.isChecked() else ServingMode.SEQUENTIAL
        await self._live(self.client.set_mode(mode))

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

    def _show_itl_target(self) -> None:
        self.itl_target.setEnabled(self.adaptive.isChecked())
        self.itl_target_label.setText(f"{self.itl_target.value()} ms" if self.adaptive.isChecked() else "off")


def _error_html(text: str) -> str:
    return f'<span style="color:{theme.current().error.name()};">{text}</span>'


def _gpu_layers(text: str) -> int | None:
    """The GPU layers field: empty for automatic, "all", or a number of layers."""
    text = text.strip().lower()
    if not text:
        return None
    if text == "all":
        return GPU_LAYERS_ALL
    if not text.isdigit():
        raise ValueError(f"GPU layers must be a number of layers or all; got {text!r}")
    return int(text)
