"""A pane's presets: one picked and applied to this pane or to all, these settings saved as one, a saved
one deleted, and the saved ones exported to or imported from a JSON file (app/workspace/presets.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QWidget,
)

from app.ui import theme
from app.workspace.pane_params import PaneParams
from app.workspace.presets import DEFAULTS, MAX_FILE_BYTES, Preset, PresetBook, PresetError

FILTER = "Presets (*.json);;All files (*)"


class PresetRow(QWidget):
    """`sigApply(preset, to_all)` when a preset is applied; `current()` gives the pane's settings to save."""

    sigApply = Signal(object, bool)  # Preset, to every pane

    def __init__(self, current: Callable[[], PaneParams], parent=None):
        super().__init__(parent)
        self._current = current
        self._book: PresetBook | None = None
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(2)
        self.combo = QComboBox(toolTip="A preset: a name for a set of sampling settings")
        grid.addWidget(self.combo, 0, 0, 1, 3)
        self.apply_button = self._button("Apply", "Set this pane's sampling settings to the preset's", lambda: self._apply(False))
        self.apply_all_button = self._button(
            "To all panes", "Set every pane's sampling settings to the preset's", lambda: self._apply(True)
        )
        self.save_button = self._button("Save as…", "Keep this pane's sampling settings as a preset, under a name", self._save)
        self.delete_button = self._button("Delete", "Delete the preset picked (the built-in ones stay)", self._delete)
        self.export_button = self._button("Export…", "Write the saved presets to a JSON file", self._export)
        self.import_button = self._button("Import…", "Add the presets of a JSON file", self._import)
        buttons = (
            self.apply_button,
            self.apply_all_button,
            self.save_button,
            self.delete_button,
            self.export_button,
            self.import_button,
        )
        for i, button in enumerate(buttons):  # three a row: the ⚙ of eight panes on a laptop stays narrow
            grid.addWidget(button, 1 + i // 3, i % 3)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.hide()
        grid.addWidget(self.status, 3, 0, 1, 3)
        self.combo.currentIndexChanged.connect(self._show_picked)
        self._show_presets()

    def _button(self, text: str, tip: str, slot) -> QPushButton:
        button = QPushButton(text, toolTip=tip)
        button.clicked.connect(slot)
        return button

    def set_book(self, book: PresetBook) -> None:
        self._book = book
        book.changed.connect(self._show_presets)
        self._show_presets()

    @property
    def picked(self) -> Preset | None:
        return self._book.get(self.combo.currentData()) if self._book is not None else None

    def pick(self, name: str) -> None:
        self.combo.setCurrentIndex(max(self.combo.findData(name), 0))

    def _show_presets(self) -> None:
        picked = self.combo.currentData()
        self.combo.blockSignals(True)
        self.combo.clear()
        for preset in self._book.presets if self._book is not None else ():
            self.combo.addItem(f"{preset.name} (built in)" if preset.builtin else preset.name, preset.name)
            self.combo.setItemData(self.combo.count() - 1, preset.about or _summary(preset), Qt.ItemDataRole.ToolTipRole)
        self.combo.setCurrentIndex(max(self.combo.findData(picked), 0))
        self.combo.blockSignals(False)
        self._show_picked()

    def _show_picked(self) -> None:
        preset, book = self.picked, self._book
        for button in (self.apply_button, self.apply_all_button):
            button.setEnabled(preset is not None)
        self.delete_button.setEnabled(preset is not None and not preset.builtin)
        self.export_button.setEnabled(book is not None and bool(book.saved))
        self.import_button.setEnabled(book is not None)
        self.save_button.setEnabled(book is not None)
        self.combo.setToolTip(preset.about or _summary(preset) if preset else "No presets")

    # -- what the buttons do -----------------------------------------------------------------------

    def _apply(self, to_all: bool) -> None:
        preset = self.picked
        if preset is not None:
            self.sigApply.emit(preset, to_all)
            self._say(f"{preset.name} applied to {'every pane' if to_all else 'this pane'}")

    def _save(self) -> None:
        picked = self.picked
        suggested = picked.name if picked is not None and not picked.builtin else ""
        name, ok = QInputDialog.getText(self, "Save a preset", "The preset's name:", text=suggested)
        if not ok:
            return
        try:
            preset = self._book.save(name, self._current())
        except PresetError as e:
            self._say(f"✗ {e}", error=True)
            return
        self.pick(preset.name)
        self._say(f"Saved as {preset.name}")

    def _delete(self) -> None:
        preset = self.picked
        if preset is None or preset.builtin:
            return
        self._book.delete(preset.name)
        self._say(f"{preset.name} deleted")

    def _export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the saved presets", "presets.json", FILTER)
        if not path:
            return
        try:
            Path(path).write_text(self._book.export_json(), encoding="utf-8")
        except OSError as e:
            self._say(f"✗ could not write {Path(path).name}: {e.strerror or e}", error=True)
            return
        self._say(f"{len(self._book.saved)} preset(s) written to {Path(path).name}")

    def _import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import presets", "", FILTER)
        if not path:
            return
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
            names = self._book.import_json(data.decode("utf-8"))
        except OSError as e:
            self._say(f"✗ could not read {Path(path).name}: {e.strerror or e}", error=True)
        except UnicodeDecodeError:
            self._say(f"✗ {Path(path).name} is not a presets file: it is not UTF-8 text; nothing was imported", error=True)
        except PresetError as e:
            self._say(f"✗ {Path(path).name}: {e}; nothing was imported", error=True)
        else:
            if names:
                self.pick(names[0])
            self._say(f"Imported {len(names)} preset(s): {', '.join(names)}" if names else "The file holds no presets")

    def _say(self, text: str, error: bool = False) -> None:
        colours = theme.current()
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {(colours.error if error else colours.text).name()};")
        self.status.setVisible(bool(text))


def _summary(preset: Preset) -> str:
    """What a saved preset sets apart from the defaults, for its tooltip."""
    changed = [f"{name} {value}" for name, value in preset.values.items() if value != getattr(DEFAULTS, name)]
    return ("Sets " + ", ".join(changed) if changed else "llama.cpp's defaults")[:400]
