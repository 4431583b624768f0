"""The step timeline dock draws the engine's steps, stacked by pane; File > Save trace writes them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.trace import STEP_TRACK

pytestmark = pytest.mark.gui


def _menu_action(window, menu_title: str, text: str):
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == menu_title)
    return next(a for a in menu.actions() if a.text() == text)


def test_the_timeline_draws_each_step_stacked_by_pane_and_the_trace_is_saved(run_tiny_window, qtbot, tmp_path, monkeypatch):
    async def scenario(window):
        set_params(window, TINY_QUICK)
        toolbar = window.findChild(QToolBar, "main-toolbar")
        button = toolbar.widgetForAction(window.timeline_dock.toggleViewAction())
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert window.timeline_dock.isVisible()
        qtbot.mouseClick(window.broadcast_edit, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(window.broadcast_edit, "Tell me a story")
        qtbot.keyClick(window.broadcast_edit, Qt.Key.Key_Return)
        await until(lambda: len(window.metrics.finished) == len(window.panes), what="the replies")
        steps = window.client.recent_steps()
        await until(lambda: window.timeline.columns.last_t_end == steps[-1].t_end, what="a tick after the last step")
        timeline = window.timeline
        for pane in window.panes:
            key = pane.session.key
            expected = [(st, p) for st in steps for p in st.parts if p.conversation_id == key]
            for is_decode in (True, False):
                x0, w, y0, h = timeline.drawn(key, is_decode)
                mine = [(st, p) for st, p in expected if p.is_decode == is_decode]
                assert len(x0) == len(mine) > 0
                assert np.allclose(x0, [st.t_start - timeline.t0 for st, _ in mine])
                assert np.allclose(w, [st.step_s for st, _ in mine])
                assert h.tolist() == [p.n_tokens for _, p in mine]
                # stacked in batch order: a part starts where the parts before it in its step end
                below = [sum(q.n_tokens for q in st.parts[: st.parts.index(p)]) for st, p in mine]
                assert y0.tolist() == below
            brush = timeline.bars[(key, True)].body.brush().color()
            assert brush.name() == pane.session.colour and brush.alpha() == 255
            assert timeline.bars[(key, False)].body.brush().color().alpha() < 255  # prompt chunks paler
        last = steps[-1]
        x = (last.t_start + last.t_end) / 2 - timeline.t0 - timeline._x_right
        assert timeline.step_at_x(x) is last
        assert f"{last.n_seqs} sequences of a limit of {last.batch_limit}" in timeline.hover_text(x)

        path = tmp_path / "window-trace.json"
        monkeypatch.setattr("app.ui.window.trace_file.QFileDialog.getSaveFileName", lambda *a, **k: (str(path), ""))
        _menu_action(window, "File", "Save trace…").trigger()
        events = json.loads(path.read_text())["traceEvents"]
        names = {ev["tid"]: ev["args"]["name"] for ev in events if ev["name"] == "thread_name"}
        spans: dict[str, list[str]] = {}
        for ev in events:
            if ev["ph"] == "X":
                spans.setdefault(names[ev["tid"]], []).append(ev["name"])
        assert len(spans[STEP_TRACK]) == len(steps)
        for i, pane in enumerate(window.panes, 1):
            assert spans[f"pane {i}: {pane.chat.name}"] == ["waiting", "prefill", "decode"]

    run_tiny_window(scenario, panes=4)
