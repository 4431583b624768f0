"""Narrow panes: eight panes on a 1366x768 laptop screen keep every button whole and working, and the
readout shortens rather than being cut. On the tiny model: what is checked is the layout and the clicks."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QToolButton
from ui_fixtures import TINY_LONG, TINY_QUICK, laid_out, on_laptop, set_params, until

from app.engine.stats import EngineSnapshot
from app.ui.pane.params_editor import SLIDERS
from app.ui.pane.readout import Readout
from app.ui.window.status_line import STATUS_WIDTH, engine_status
from app.workspace.chat_store import NOTICE

pytestmark = pytest.mark.gui


def _cut_buttons(pane) -> list[str]:
    """The visible buttons whose text, or icon where a button shows one alone, is wider than the button
    leaves room for (2 px of frame and padding each side)."""
    cut = []
    for button in pane.findChildren(QAbstractButton):
        icon_only = isinstance(button, QToolButton) and not button.icon().isNull()
        content = button.iconSize().width() if icon_only else button.fontMetrics().horizontalAdvance(button.text())
        if button.isVisible() and content + 4 > button.width():
            cut.append(button.text())
    return cut


def _untipped_buttons(pane) -> list[str]:
    return [b.text() for b in pane.findChildren(QAbstractButton) if b.isVisible() and not b.toolTip()]


def test_eight_panes_on_a_laptop_screen_keep_every_button_whole(run_tiny_window):
    async def scenario(window):
        room = on_laptop(window)
        await laid_out()
        assert window.geometry() == room  # its minimum size did not push it past the screen
        for pane in window.panes:
            assert _cut_buttons(pane) == [] and _untipped_buttons(pane) == []
            shown = pane.readout.shown_text()
            assert "tok/s" in shown and pane.readout.fontMetrics().horizontalAdvance(shown) <= pane.readout.width()
            assert pane.readout.toolTip().startswith(pane.readout.text()) and "TTFT:" in pane.readout.toolTip()

        window.engine_dock.show()  # the narrowest panes: the engine and plots docks beside eight panes
        await laid_out()
        assert window.geometry() == room
        assert all(_cut_buttons(pane) == [] for pane in window.panes)

    run_tiny_window(scenario, panes=8)


def test_eight_panes_on_two_models_fit_a_laptop_screen_with_their_model_pickers(run_window, tiny_model_path):
    async def scenario(window):  # the bundled model's long name first, as people's models are named
        await window.client.load_model(window.client.config.with_(model_path=tiny_model_path), "tiny")
        window.show_models()  # as the library's Load does once the model is in
        room = on_laptop(window)
        await laid_out()
        assert window.geometry() == room  # the pickers did not push it past the screen
        for pane in window.panes:
            assert pane.model_combo.isVisible() and pane.model_combo.width() >= 60
            assert _cut_buttons(pane) == []

    run_window(scenario, panes=8)


def test_a_panes_settings_open_at_eight_panes_without_growing_the_window_past_the_screen(run_tiny_window, qtbot):
    async def scenario(window):
        room = on_laptop(window)
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        await laid_out()
        assert pane.params_area.isVisible() and window.geometry() == room  # they scroll inside the pane
        assert _cut_buttons(pane) == []

    run_tiny_window(scenario, panes=8)


def test_every_pane_action_works_when_clicked_at_eight_panes(run_tiny_window, qtbot, monkeypatch, tmp_path):
    exported = tmp_path / "chat.md"
    monkeypatch.setattr("app.ui.dialogs.QFileDialog.getSaveFileName", lambda *args: (str(exported), ""))

    def click(button) -> None:
        assert button.isVisible() and button.isEnabled(), button.text()
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)

    async def scenario(window):
        on_laptop(window)
        pane = window.panes[-1]
        set_params(window, TINY_LONG)
        qtbot.keyClicks(pane.input, "Write a long story about a dragon.")
        click(pane.send_button)
        await until(lambda: window.metrics.panes[pane.key].gen_tokens >= 2, what="the first tokens")
        assert pane.send_button.isHidden()  # Stop takes its place while the reply runs
        click(pane.stop_button)
        await until(lambda: not pane.is_busy, what="the stop")
        assert pane.chat.messages[-1] == {"role": NOTICE, "content": "stopped"} and pane.stop_button.isHidden()

        set_params(window, TINY_QUICK)
        click(pane.regenerate_button)
        assert pane.is_busy
        await until(lambda: not pane.is_busy, what="the regenerated reply")
        assert [m["role"] for m in pane.chat.messages] == ["user", "assistant", NOTICE]

        click(pane.export_button)
        assert "dragon" in exported.read_text(encoding="utf-8")

        click(pane.clear_button)
        await until(lambda: not pane.chat.messages, what="the clear")

    run_tiny_window(scenario, panes=8)


def test_a_narrow_readout_shows_the_longest_form_that_fits_and_the_whole_in_its_tooltip(qtbot):
    readout = Readout(legend="TTFT: time to the first token")
    qtbot.addWidget(readout)
    whole, shorter, shortest = "18 tok/s · TTFT 146 ms · KV hit 97%", "18 tok/s · 146 ms", "18 tok/s"
    readout.setText(whole, shorter, shortest)
    width = readout.fontMetrics().horizontalAdvance
    for room, shown in ((1000, whole), (width(shorter), shorter), (width(shorter) - 1, shortest), (20, "…")):
        readout.resize(room, readout.height())
        assert readout.shown_text() == shown, room
    assert readout.toolTip() == "18 tok/s · TTFT 146 ms · KV hit 97%\nTTFT: time to the first token"


def test_the_pane_header_marks_high_priority_and_a_system_prompt(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        assert "⬆" not in pane.name_label.text() and "§" not in pane.name_label.text()
        qtbot.mouseClick(editor.high_priority, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(editor.system_edit, "You answer in French.")
        assert "⬆" in pane.name_label.text() and "§" in pane.name_label.text()
        assert pane.session.params.high_priority  # what its requests are sent with (test_workspace: their priority)
        assert "You answer in French." in pane.name_label.toolTip()
        qtbot.mouseClick(editor.high_priority, Qt.MouseButton.LeftButton)
        assert "⬆" not in pane.name_label.text() and not pane.session.params.high_priority

    run_tiny_window(scenario, panes=1)


def test_every_slider_explains_itself_and_its_range(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        for spec in SLIDERS:
            slider = pane.params_editor.sliders[spec.name]
            tip = slider.toolTip()
            assert len(tip) > 40 and f"Range {spec.lo:g} to {spec.hi:g}" in tip, spec.name
            label = pane.params_editor.layout().labelForField(slider.parentWidget())
            assert label.text() == spec.label and label.toolTip() == tip

    run_tiny_window(scenario, panes=1)


def test_the_status_line_has_shorter_forms_that_fit_its_label_and_elides_rather_than_collapse(qtbot):
    busy = EngineSnapshot(
        cells_used=900, cells_total=1024, slots_used=4, slots_total=4, running=3, waiting=2, evictions=5, preemptions=1,
        steps=120, generated_tokens=400, paused=1, saved_entries=2, saved_bytes=19 * 2**20, saves=5, restores=3,
        restored_tokens=900, recomputed_tokens=12345,
    )  # fmt: skip
    forms = engine_status("continuous", busy)
    assert [len(f) for f in forms] == sorted((len(f) for f in forms), reverse=True)
    label = Readout(muted=False, pixel_size=12, elide=True)
    qtbot.addWidget(label)
    label.setText(*forms)
    label.resize(STATUS_WIDTH, label.height())
    shown = label.shown_text()
    assert shown in forms[1:] and "KV cells 900/1024" in shown  # the whole line needs more than the label has
    label.resize(120, label.height())
    assert label.shown_text().startswith("continuous") and label.shown_text().endswith("…")
    assert label.fontMetrics().horizontalAdvance(label.shown_text()) <= 120
