"""File > Save trace…: the recent engine steps and the panes' recent requests as a Chrome trace
(app/engine/trace.py), to open in the Perfetto UI or chrome://tracing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox

from app.engine.stats import RequestStats, StepStats
from app.engine.trace import STEP_TRACK, trace_events, write_trace


def panes_trace(
    pane_names: dict[str, tuple[str, str]], requests: Iterable[RequestStats], steps: Sequence[StepStats]
) -> list[dict]:
    """The steps (the default model's, the last 4096 kept) and the requests the window saw end, a
    track per pane (`pane_names`: chat key -> (name, colour), in the panes' order)."""
    panes = {key: f"pane {i}: {name}" for i, (key, (name, _colour)) in enumerate(pane_names.items(), 1)}
    return trace_events({STEP_TRACK: steps}, requests, track_names=panes)


def ask_and_save(window: QMainWindow, events: list[dict]) -> Path | None:
    """Ask where, write the trace there and say so in the status bar; None when cancelled."""
    path, _ = QFileDialog.getSaveFileName(window, "Save trace", "batch-trace.json", "Chrome trace (*.json)")
    if not path:
        return None
    try:
        write_trace(path, events)
    except OSError as e:
        QMessageBox.warning(window, "Save trace", f"Could not write {path}: {e.strerror or e}")
        return None
    window.statusBar().showMessage(f"Trace saved to {Path(path).name}: open it in ui.perfetto.dev", 10000)
    return Path(path)
