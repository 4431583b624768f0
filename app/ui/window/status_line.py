"""The status bar's permanent figures: the engine's line, and a warning while chats cannot be saved;
and its messages of what the engine did on its own: a KV layout changed while chats ran."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar

from app.client import EngineClient
from app.engine.stats import EngineSnapshot
from app.ui.pane.readout import Readout
from app.workspace.chat_store import PendingSaves

STATUS_WIDTH = 560  # px: the engine's line; its shorter forms fit in this, so it is never "…"


def add_status_widgets(bar: QStatusBar) -> tuple[Readout, QLabel]:
    """The engine's line and the save warning (hidden until a save fails), at the bar's right."""
    status_label = Readout(muted=False, pixel_size=12, elide=True)
    status_label.setMinimumWidth(STATUS_WIDTH)
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


def engine_status(mode: str, s: EngineSnapshot) -> tuple[str, ...]:
    """The status bar's line, then shorter forms of it for a narrower bar: what runs and waits, the
    pool, and the RAM tier once it was used; the shortest keeps what runs and the pool."""
    running = f"running {s.running - s.paused}{f' · paused {s.paused}' if s.paused else ''} · waiting {s.waiting}"
    cells = f"KV cells {s.cells_used}/{s.cells_total}"
    extra = f" · evictions {s.evictions}"
    if s.recomputed_tokens:  # what a larger pool (or the RAM tier) would not have paid
        extra += f" · recomputed {s.recomputed_tokens} tokens"
    if s.saves:
        extra += f" · in RAM {s.saved_entries} ({s.saved_bytes / 2**20:.0f} MiB), {s.restores} restored"
    return (
        f"{mode} · {running} · {cells}{extra} · steps {s.steps}",
        f"{mode} · {running} · {cells} · evictions {s.evictions}",
        f"{mode} · {running} · {cells}",
        f"{mode} · run {s.running} · wait {s.waiting} · KV {s.cells_used}/{s.cells_total}",
    )


LAYOUT_MESSAGE_MS = 15000


def layout_message(s: EngineSnapshot, model: str | None = None) -> str:
    """What the status bar says when a model's KV layout changed: to what, and why (named when several are loaded)."""
    text = f"The KV layout changed to {s.kv_layout}"
    return f"{model}: {text[0].lower()}{text[1:]}" if model else text


class LayoutWatch:
    """Says in the status bar when a loaded model's KV layout changed while chats ran (its snapshot's
    `layout_changes` grew since the last look); a model loaded again counts from 0 again."""

    def __init__(self, client: EngineClient, bar: QStatusBar):
        self.client, self.bar = client, bar
        self._seen: dict[str, int] = {}  # model -> its layout changes at the last look

    def check(self) -> None:
        seen, self._seen = self._seen, {}
        models = list(self.client.models)
        told = []
        for model in models:
            s = self.client.snapshot_of(model)
            if s is None:
                continue
            self._seen[model] = s.layout_changes
            if s.layout_changes > seen.get(model, 0):
                told.append(layout_message(s, model if len(models) > 1 else None))
        if told:
            self.bar.showMessage(" · ".join(told), LAYOUT_MESSAGE_MS)
