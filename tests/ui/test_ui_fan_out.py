"""Fan out on the real window: one prompt over a setting's values, a pane each, the compare view and its
export. On the tiny model: which panes a fan-out takes is test_workspace's; here, the dialog, the compare
view and that equal settings write equal text, whatever it says."""

from __future__ import annotations

import csv
import math

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar
from ui_fixtures import QUICK, TINY_QUICK, set_params, until

from app.ui.docks.compare_view import COLUMNS

pytestmark = pytest.mark.gui


def _click_action(qtbot, window, action) -> None:
    button = window.findChild(QToolBar, "main-toolbar").widgetForAction(action)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_a_temperature_sweep_with_the_seed_locked_fills_panes_and_the_compare_view(run_tiny_window, qtbot, tmp_path, monkeypatch):
    exported = tmp_path / "sweep"  # no extension: the chosen filter's is added
    monkeypatch.setattr(
        "app.ui.docks.compare_view.QFileDialog.getSaveFileName", lambda *args: (str(exported), "CSV, for a spreadsheet (*.csv)")
    )

    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=20))
        _click_action(qtbot, window, window.action("compare.fan_out"))
        dialog = window.fan_out_dialog
        await until(dialog.isVisible, what="the dialog")
        qtbot.keyClicks(dialog.prompt_edit, "Write a short line about rain.")
        assert not dialog.start_button.isEnabled()  # no values yet: it says what to write
        assert "write the values" in dialog.preview.text()
        qtbot.keyClicks(dialog.values_edit, "0.9, 0.9, 1.8")
        assert dialog.start_button.isEnabled() and dialog.preview.text().startswith("3 panes")
        seed = dialog.sweep().seed
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        panes = window.panes
        assert len(panes) == 3 and all(p.is_busy for p in panes)  # two free panes and a new one, started together
        await until(lambda: window.workspace.is_idle, what="the three replies")
        assert [p.chat.name for p in panes] == ["Temperature 0.9", "Temperature 0.9", "Temperature 1.8"]
        assert [p.params.temperature for p in panes] == [0.9, 0.9, 1.8] and {p.params.seed for p in panes} == {seed}
        replies = [p.chat.messages[1]["content"] for p in panes]
        assert replies[0] == replies[1]  # equal settings and seed: equal text
        view = window.compare_view
        assert window.compare_dock.isVisible() and view.table.rowCount() == 3
        for r, row in enumerate(view.rows):
            assert row.status in ("stop", "length") and row.tokens > 0 and row.tok_s > 0 and row.ttft_ms > 0
            assert -20 < row.mean_logprob <= 0 and not math.isnan(row.mean_logprob)
            assert view.table.item(r, COLUMNS.index("Reply")).text() == replies[r]
        qtbot.mouseClick(view.export_button, Qt.MouseButton.LeftButton)
        table = list(csv.reader((tmp_path / "sweep.csv").open(encoding="utf-8")))
        assert table[0] == list(COLUMNS) and [t[-1] for t in table[1:]] == replies
        assert "sweep.csv" in window.statusBar().currentMessage()  # a successful export says where

    run_tiny_window(scenario, panes=2)


def test_a_fan_out_larger_than_the_free_panes_says_so_and_sends_nothing(run_tiny_window, qtbot):
    async def scenario(window):
        window.panes[0].input.setPlainText("kept draft")
        dialog = window.ask_fan_out()
        assert dialog.prompt_edit.toPlainText() == "kept draft"  # the pane's typed text is the prompt to start from
        dialog.setting_combo.setCurrentIndex(dialog.setting_combo.findText("Seed"))
        qtbot.keyClicks(dialog.values_edit, "1..5")
        assert not dialog.start_button.isEnabled()
        assert "at most 4 panes" in dialog.preview.text()
        dialog.values_edit.clear()
        qtbot.keyClicks(dialog.values_edit, "1..4")
        assert dialog.start_button.isEnabled()
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)  # one of the 4 panes holds a draft
        assert len(window.panes) == 4 and not any(p.is_busy for p in window.panes)
        assert window.panes[0].input.toPlainText() == "kept draft"
        assert "Fan out needs 4 free panes" in window.statusBar().currentMessage()

    run_tiny_window(scenario, panes=4, capacity=4)


def test_a_sweep_over_the_loaded_models_sends_the_prompt_to_each(run_window, qtbot, tiny_model_path):
    async def scenario(window):  # the bundled model's long name first: it is shortened in the compare view
        second = await window.client.load_model(window.client.config.with_(model_path=tiny_model_path), "tiny")
        window.show_models()  # as the library's Load does once the model is in
        first = window.client.default_model
        set_params(window, QUICK.with_(max_tokens=12))
        dialog = window.ask_fan_out()
        qtbot.keyClicks(dialog.prompt_edit, "Name a colour.")
        dialog.setting_combo.setCurrentIndex(dialog.setting_combo.findText("Model"))
        assert first in dialog.values_edit.placeholderText() and second in dialog.values_edit.placeholderText()
        qtbot.keyClicks(dialog.values_edit, "nope")
        assert not dialog.start_button.isEnabled() and "no model named 'nope' is loaded" in dialog.preview.text()
        dialog.values_edit.clear()
        qtbot.keyClicks(dialog.values_edit, first)
        qtbot.keyClick(dialog.values_edit, Qt.Key.Key_Return)  # a name a line
        qtbot.keyClicks(dialog.values_edit, second)
        finals = {}
        for pane in window.panes:
            pane.sigReplyFinished.connect(lambda final, p=pane: finals.__setitem__(p.key, final))
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        await until(lambda: len(finals) == 2, what="both replies")
        panes = window.panes
        assert [p.session.model for p in panes] == [first, second]
        assert [finals[p.key].model for p in panes] == [first, second]  # each answered by its model
        assert [row.setting for row in window.compare_view.rows] == [f"Model: {first[:11]}…{first[-12:]}", "Model: tiny"]

    run_window(scenario, panes=2)
