"""A dark palette keeps every text readable: colours come from the palette, not fixed hex values (on the
tiny model: the colours of a turn do not depend on its words)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from ui_fixtures import TINY_QUICK, set_params, until

from app.ui.theme import Theme, contrast, dark_palette

pytestmark = pytest.mark.gui

READABLE = 4.5  # WCAG's contrast ratio for body text


@pytest.mark.parametrize("dark", [False, True])
def test_every_text_colour_reads_on_its_background(run_tiny_window, qapp, dark):
    before = qapp.palette()
    if dark:
        qapp.setPalette(dark_palette())

    async def scenario(window):
        set_params(window, TINY_QUICK)
        pane = window.panes[0]
        pane.session.send("Write a line of Python that prints hello.")
        await until(lambda: not pane.is_busy, what="the reply")
        colours = Theme.of(qapp.palette())
        assert colours.dark == dark
        assert contrast(colours.text, colours.user_bubble) >= READABLE
        assert contrast(colours.text, colours.code_background) >= READABLE
        assert contrast(colours.assistant, colours.base) >= READABLE
        assert contrast(colours.notice, colours.base) >= READABLE
        window_bg = window.palette().color(QPalette.ColorRole.Window)
        assert contrast(window.status_label.pen_colour(), window_bg) >= READABLE
        assert contrast(pane.readout.pen_colour(), window_bg) >= READABLE
        shown = pane.transcript.toHtml()
        assert colours.user_bubble.name() in shown and colours.assistant.name() in shown

    try:
        run_tiny_window(scenario, panes=1)
    finally:
        qapp.setPalette(before)


@pytest.mark.parametrize("dark", [False, True])
def test_warnings_and_the_engine_banner_read_in_the_palette(run_tiny_window, qapp, qtbot, dark):
    before = qapp.palette()
    if dark:
        qapp.setPalette(dark_palette())

    async def scenario(window):
        colours = Theme.of(qapp.palette())
        window_bg = window.palette().color(QPalette.ColorRole.Window)
        # the engine panel's notices and errors are on the window background
        assert contrast(colours.notice, window_bg) >= READABLE
        assert contrast(colours.error, window_bg) >= READABLE
        chart = window.benchmark_panel.chart  # the benchmark's chart is drawn in the palette too
        assert chart.backgroundBrush().color().name() == colours.base.name()
        assert contrast(chart.getAxis("left").textPen().color(), colours.base) >= READABLE

        window.banner.show_failure("the engine stopped after an internal error: boom")
        await until(lambda: window.banner.isVisible(), what="the banner")
        banner = window.banner.grab().toImage()
        label = window.banner.label
        background = banner.pixelColor(label.geometry().left() + 1, label.geometry().top() + 1)
        assert background.name() == colours.error_background.name()  # drawn from the palette
        assert contrast(label.palette().color(QPalette.ColorRole.WindowText), background) >= READABLE

        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        qtbot.keyClicks(editor.endpoint_edits["remote_api_key"], "secret")
        qtbot.keyClicks(editor.endpoint_edits["remote_url"], "http://example.test:8000/v1")
        assert editor.key_warning.isVisible()
        warning = editor.key_warning.palette().color(QPalette.ColorRole.WindowText)
        assert warning.name() == colours.error.name()
        assert contrast(warning, editor.palette().color(QPalette.ColorRole.Window)) >= READABLE

    try:
        run_tiny_window(scenario, panes=1)
    finally:
        qapp.setPalette(before)
