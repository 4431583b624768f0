"""What survives a restart: pane count, chats, slider values, geometry, drafts, docks; and the scripted
screenshot. On the tiny model: what is kept does not depend on what a reply says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QToolBar
from ui_fixtures import TINY_QUICK, close_window, open_window, until

from app.ui.settings import AppSettings, open_qsettings

pytestmark = pytest.mark.gui


def test_settings_and_chats_round_trip_through_a_restart(loop, home, tiny_model_path):
    async def first_run():
        window = await open_window(tiny_model_path, home, panes=3)
        window.panes[1].params_editor.set_params(TINY_QUICK.with_(top_k=11, seed=5, system_prompt="Be brief."))
        window.panes[1].session.send("Hello there")
        await until(lambda: window.workspace.is_idle)
        window.resize(780, 560)  # inside the offscreen screen (800x600): restoreGeometry keeps windows on screen
        saved = [(p.key, list(p.chat.messages), p.params) for p in window.panes]
        size = (window.width(), window.height())
        await close_window(window)
        return saved, size

    async def second_run():
        window = await open_window(tiny_model_path, home, panes=None)  # no --panes: the saved count
        restored = [(p.key, list(p.chat.messages), p.params) for p in window.panes]
        size = (window.width(), window.height())
        await close_window(window)
        return restored, size

    saved, saved_size = loop.run_until_complete(first_run())
    restored, size = loop.run_until_complete(second_run())
    assert restored == saved
    assert [m["role"] for m in restored[1][1]][:2] == ["user", "assistant"]
    assert size == saved_size == (780, 560)


def test_screenshot_command_writes_a_png(tmp_path, tiny_model_path):
    png = tmp_path / "x.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", BATCH_PLAYGROUND_HOME=str(tmp_path / "home"))
    model = ("--model", tiny_model_path, "--threads", "1")  # the picture is checked, not the replies
    result = subprocess.run(
        [sys.executable, "-m", "app", *model, "--panes", "2", "--prompt", "hi", "--screenshot", str(png), "--exit-when-done"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    image = QImage(str(png))
    assert (
        700 <= image.width() <= 800 and 500 <= image.height() <= 800
    )  # the whole window, fitted to the 800x800 offscreen screen


def test_drafts_and_docks_come_back_after_a_restart(loop, home, tiny_model_path, qtbot):
    def toolbar_button(window, dock):
        return window.findChild(QToolBar, "main-toolbar").widgetForAction(dock.toggleViewAction())

    async def first_run():
        window = await open_window(tiny_model_path, home, panes=2)
        assert window.engine_dock.isHidden() and window.plots_dock.isVisible()  # the first start's docks
        qtbot.mouseClick(toolbar_button(window, window.engine_dock), Qt.MouseButton.LeftButton)
        qtbot.mouseClick(toolbar_button(window, window.plots_dock), Qt.MouseButton.LeftButton)
        qtbot.keyClicks(window.panes[1].input, "half a thought")
        qtbot.keyClicks(window.broadcast_edit, "for everyone")
        keys = [p.key for p in window.panes]
        await close_window(window)
        return keys

    async def second_run():
        window = await open_window(tiny_model_path, home, panes=None)
        shown = (window.engine_dock.isVisible(), window.plots_dock.isVisible(), window.chats_dock.isVisible())
        drafts = [p.input.toPlainText() for p in window.panes], window.broadcast_edit.text()
        window.panes[1].input.clear()  # sent or deleted: no draft comes back
        await close_window(window)
        return shown, drafts

    keys = loop.run_until_complete(first_run())
    shown, drafts = loop.run_until_complete(second_run())
    assert shown == (True, False, False)
    assert drafts == (["", "half a thought"], "for everyone")
    assert AppSettings(open_qsettings()).draft(keys[1]) == ""
