"""Presets on the real window, by mouse: a built-in one applied to a pane and to all, these settings
saved under a name (kept by the settings file for the next start), exported and imported again, a bad
file refused with its reason and nothing lost; a fan-out sweeping an Advanced knob."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from ui_fixtures import TINY_QUICK, set_params, until

from app.ui.settings import AppSettings, open_qsettings
from app.workspace.presets import PresetBook

pytestmark = pytest.mark.gui


def pick(qtbot, combo, data: str) -> None:
    """Open a box with the mouse and pick the entry of `data` with the keyboard."""
    qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
    combo.view().setCurrentIndex(combo.model().index(combo.findData(data), 0))
    qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
    assert combo.currentData() == data


def test_presets_are_applied_saved_exported_and_imported_by_mouse(run_tiny_window, qtbot, tmp_path, monkeypatch):
    exported, broken = tmp_path / "mine.json", tmp_path / "broken.json"
    broken.write_text(json.dumps([{"name": "Hot", "values": {"temperature": 9}}]), encoding="utf-8")

    async def scenario(window):
        set_params(window, TINY_QUICK.with_(system_prompt="Be brief."))
        first, second = window.panes
        qtbot.mouseClick(first.settings_button, Qt.MouseButton.LeftButton)
        row = first.params_editor.preset_row
        assert [row.combo.itemData(i) for i in range(row.combo.count())] == ["Precise", "Balanced", "Creative", "Deterministic"]
        assert not row.export_button.isEnabled() and not row.delete_button.isEnabled()  # nothing saved yet

        pick(qtbot, row.combo, "Deterministic")
        qtbot.mouseClick(row.apply_button, Qt.MouseButton.LeftButton)
        assert first.params.temperature == 0.0 and first.params.system_prompt == "Be brief."
        assert second.params.temperature == TINY_QUICK.temperature  # this pane only
        assert first.params_editor.values["temperature"].text() == "0.00"

        pick(qtbot, row.combo, "Creative")
        qtbot.mouseClick(row.apply_all_button, Qt.MouseButton.LeftButton)
        assert all(p.params.xtc_probability == 0.5 and p.params.dry_multiplier == 0.8 for p in window.panes)
        assert first.params_editor.advanced_button.text().startswith("Advanced samplers (")
        assert window.settings.pane_params(second.key) == second.params  # saved as any change is

        first.params_editor.sliders["top_k"].setValue(12)
        monkeypatch.setattr("app.ui.pane.preset_row.QInputDialog.getText", lambda *a, **k: ("My sampler", True))
        qtbot.mouseClick(row.save_button, Qt.MouseButton.LeftButton)
        assert row.combo.currentData() == "My sampler" and row.delete_button.isEnabled()
        second_row = second.params_editor.preset_row
        assert second_row.combo.findData("My sampler") >= 0  # every pane's list has it
        assert PresetBook(AppSettings(open_qsettings())).get("My sampler").values["top_k"] == 12  # and a new start

        monkeypatch.setattr("app.ui.pane.preset_row.QFileDialog.getSaveFileName", lambda *a: (str(exported), ""))
        qtbot.mouseClick(row.export_button, Qt.MouseButton.LeftButton)
        assert json.loads(exported.read_text(encoding="utf-8"))["presets"][0]["name"] == "My sampler"

        qtbot.mouseClick(row.delete_button, Qt.MouseButton.LeftButton)
        assert second_row.combo.findData("My sampler") < 0 and not row.export_button.isEnabled()

        monkeypatch.setattr("app.ui.pane.preset_row.QFileDialog.getOpenFileName", lambda *a: (str(broken), ""))
        qtbot.mouseClick(row.import_button, Qt.MouseButton.LeftButton)
        said = row.status.text()
        assert row.status.isVisible() and "broken.json" in said and "'temperature' must be a number between 0 and 2" in said
        assert "nothing was imported" in said and row.combo.findData("Hot") < 0

        monkeypatch.setattr("app.ui.pane.preset_row.QFileDialog.getOpenFileName", lambda *a: (str(exported), ""))
        qtbot.mouseClick(row.import_button, Qt.MouseButton.LeftButton)
        assert row.combo.currentData() == "My sampler" and "Imported 1 preset(s): My sampler" in row.status.text()
        qtbot.mouseClick(second.settings_button, Qt.MouseButton.LeftButton)
        pick(qtbot, second_row.combo, "My sampler")
        qtbot.mouseClick(second_row.apply_button, Qt.MouseButton.LeftButton)
        assert second.params.top_k == 12

    run_tiny_window(scenario, panes=2)


def test_a_fan_out_sweeps_an_advanced_knob(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=8))
        dialog = window.ask_fan_out()
        await until(dialog.isVisible, what="the dialog")
        qtbot.keyClicks(dialog.prompt_edit, "Hello")
        combo = dialog.setting_combo
        qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
        combo.view().setCurrentIndex(combo.model().index(combo.findText("XTC probability"), 0))
        qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
        assert dialog.setting.name == "xtc_probability"
        qtbot.keyClicks(dialog.values_edit, "0, 1")
        assert dialog.start_button.isEnabled(), dialog.preview.text()
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        await until(lambda: window.workspace.is_idle, what="the replies")
        assert [p.params.xtc_probability for p in window.panes] == [0.0, 1.0]
        assert [p.chat.name for p in window.panes] == ["XTC probability 0", "XTC probability 1"]

    run_tiny_window(scenario, panes=2)
