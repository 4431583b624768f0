"""Show batching: one prompt to every pane three times (sequential, static, continuous), to fresh
chats, then the three step timelines side by side with their tok/s; the serving mode comes back."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.params import ServingMode

pytestmark = pytest.mark.gui


def _toolbar_button(window, action):
    return window.findChild(QToolBar, "main-toolbar").widgetForAction(action)


def test_show_batching_draws_three_runs_whose_steps_differ_as_the_modes_do(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=12))
        first = window.panes[0]
        qtbot.keyClicks(first.input, "an earlier chat")
        qtbot.keyClick(first.input, Qt.Key.Key_Return)
        await until(lambda: window.workspace.is_idle and first.chat.messages[-1]["role"] != "user", 30, "the first reply")
        earlier = first.chat.chat_id
        qtbot.mouseClick(_toolbar_button(window, window.show_batching_action), Qt.MouseButton.LeftButton)
        await until(lambda: window.batching_dock.isVisible() and len(window.batching.timelines) == 3, 120, "the three runs")
        comparison = window.batching
        captions = [label.text() for label in comparison.captions]
        assert [c.split(":")[0] for c in captions] == ["Sequential", "Static batching", "Continuous batching"]
        assert all("tok/s" in c for c in captions)
        runs = [timeline.columns.steps for timeline in comparison.timelines]
        assert all(runs), "every run drew its steps"
        assert max(st.n_seqs for st in runs[0]) == 1  # one request at a time
        assert max(st.n_seqs for st in runs[1]) == 4 and max(st.n_seqs for st in runs[2]) == 4
        for timeline, steps in zip(comparison.timelines, runs):
            keys = timeline.columns.keys
            drawn = sum(len(timeline.drawn(key, decode)[0]) for key in keys for decode in (True, False))
            assert drawn == sum(len(st.parts) for st in steps)  # a rectangle per sequence per step
            assert timeline.plot.getViewBox().viewRange()[0][0] <= 0.0  # x from the broadcast
        assert window.client.config.mode is ServingMode.BATCHED  # put back
        assert earlier in {chat.chat_id for chat, _open in window.workspace.listed_chats()}  # kept in the chat list

    run_tiny_window(scenario, panes=4)
