"""File > Save trace…: the recent engine steps and the panes' recent requests as a Chrome trace
(app/engine/trace.py), to open in the Perfetto UI or chrome://tracing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.engine.trace import STEP_TRACK, trace_events, write_trace

if TYPE_CHECKING:
    from .main_window import MainWindow


def window_trace(window: MainWindow) -> list[dict]:
    """The default model's steps kept (the last 4096) and the requests the window saw end."""
    names = {key: name for key, (name, _colour) in window.pane_names().items()}
    panes = {key: f"pane {i}: {name}" for i, (key, name) in enumerate(names.items(), 1)}
    requests = [stats for _pane, stats in window.metrics.finished]
    return trace_events({STEP_TRACK: window.client.recent_steps()}, requests, track_names=panes)


def save_trace(window: MainWindow) -> Path | None:
    """Ask where, and write the trace there; None when cancelled."""
    path, _ = QFileDialog.getSaveFileName(window, "Save trace", "batch-trace.json", "Chrome trace (*.json)")
    if not path:
        return None
    try:
        write_trace(path, window_trace(window))
    except OSError as e:
        QMessageBox.warning(window, "Save trace", f"Could not write {path}: {e.strerror or e}")
        return None
    window.statusBar().showMessage(f"Trace saved to {Path(path).name}: open it in ui.perfetto.dev", 10000)
    return Path(path)
