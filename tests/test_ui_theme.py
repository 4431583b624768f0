"""A dark palette keeps every text readable: colours come from the palette, not fixed hex values."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QPalette
from ui_fixtures import QUICK, set_params, until

from app.ui.theme import Theme, contrast, dark_palette

READABLE = 4.5  # WCAG's contrast ratio for body text


@pytest.mark.parametrize("dark", [False, True])
def test_every_text_colour_reads_on_its_background(run_window, qapp, dark):
    before = qapp.palette()
    if dark:
        qapp.setPalette(dark_palette())

    async def scenario(window):
        set_params(window, QUICK)
        pane = window.panes[0]
        pane.send("Write a line of Python that prints hello.")
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
        run_window(scenario, panes=1)
    finally:
        qapp.setPalette(before)
