"""The status bar's permanent figures: the engine's line, and a warning while chats cannot be saved."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar

from app.engine.stats import EngineSnapshot
from app.workspace.chat_store import PendingSaves

from .readout import Readout


def add_status_widgets(bar: QStatusBar) -> tuple[Readout, QLabel]:
    """The engine's line and the save warning (hidden until a save fails), at the bar's right."""
    status_label = Readout(muted=False, pixel_size=12)
    status_label.setMinimumWidth(560)
    status_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
    save_warning = QLabel()
    save_warning.setStyleSheet("color: white; background: #b00020; padding: 1px 6px;")
    save_warning.hide()
    bar.addPermanentWidget(save_warning)
    bar.addPermanentWidget(status_label)
    return status_label, save_warning


def show_save_state(bar: QStatusBar, save_warning: QLabel, saves: PendingSaves, folder: Path) -> None:
    """A failing save is told once, in the status bar, until a save works again; a repaired text, in a message."""
    if saves.repaired:
        names = ", ".join(f"“{chat.name}”" for chat in saves.repaired)
        bar.showMessage(f"The text of {names} was repaired to be saved: broken characters became �.", 20000)
    error = saves.failure
    if error is None:
        save_warning.hide()
    elif save_warning.isHidden():
        save_warning.setText(f"Chats cannot be saved: {error.strerror or error}. They are kept and saved when possible.")
        save_warning.setToolTip(f"{folder}\n{error}")
        save_warning.show()


def engine_status(mode: str, s: EngineSnapshot) -> str:
    """The status bar's line: what runs and waits, the pool, and the RAM tier once it was used."""
    text = (
        f"{mode} · running {s.running - s.paused}{f' · paused {s.paused}' if s.paused else ''} · waiting {s.waiting} · "
        f"KV cells {s.cells_used}/{s.cells_total} · evictions {s.evictions}"
    )
    if s.recomputed_tokens:  # what a larger pool (or the RAM tier) would not have paid
        text += f" · recomputed {s.recomputed_tokens} tokens"
    if s.saves:
        text += f" · in RAM {s.saved_entries} ({s.saved_bytes / 2**20:.0f} MiB), {s.restores} restored"
    return f"{text} · steps {s.steps}"
