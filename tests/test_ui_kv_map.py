"""The KV cells dock: opened from the toolbar by mouse, it draws the engine's cell map: each slot's
cells in its pane's colour, as many as the map says, a shared prefix checkered, and the RAM tier."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QPushButton, QToolBar, QToolButton
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.cell_map import SlotState
from app.ui.kv_map import FREE, lay_out

pytestmark = pytest.mark.gui

SYSTEM_LIKE = "Once upon a time, in a village by the sea, there lived an old fisherman named Tom. " * 8


def toolbar_button(window, action):
    bar = window.findChild(QToolBar, "main-toolbar")
    return next(b for b in bar.findChildren(QToolButton) if b.defaultAction() is action)


def test_the_dock_opened_by_mouse_draws_each_panes_cells_as_the_engine_counts_them(run_tiny_window, qtbot):
    async def scenario(window):
        assert window.kv_map_dock.isHidden()
        qtbot.mouseClick(toolbar_button(window, window.kv_map_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        assert window.kv_map_dock.isVisible()
        set_params(window, TINY_QUICK)
        window.broadcast_edit.setText(SYSTEM_LIKE + "What was his name?")
        send = next(b for b in window.findChildren(QPushButton) if b.text() == "Send to all")
        qtbot.mouseClick(send, Qt.MouseButton.LeftButton)
        await until(lambda: all(p.session.chat.messages and not p.is_busy for p in window.panes), what="replies")
        m = window.client.cell_map_of()
        await until(lambda: window.kv_map.shown is m, what="the idle map drawn")
        return window, m

    window, m = run_tiny_window(scenario, panes=4)
    panel = window.kv_map
    drawn = panel.layout_now
    assert drawn is not None and list(drawn.cell_counts(len(m.slots))) == [s.own for s in m.slots]
    assert int((drawn.slot_index == FREE).sum()) == m.n_cells - m.cells_used
    keys = {p.session.key: p.session.colour for p in window.panes}
    held = [s for s in m.slots if s.conversation_id in keys]
    assert len(held) == 4 and all(s.state is SlotState.KEPT for s in held)
    assert all(s.shared > 100 for s in held)  # the broadcast's common prompt: one copy, shared
    pixels = panel.image.image
    for s in held:  # a cell of each pane's own run has its colour, faded as kept for the next turn
        i = m.slots.index(s)
        rows, cols = np.nonzero((drawn.slot_index == i) & ~drawn.shared)
        if len(rows):
            expected = panel.colour_of(s.conversation_id)
            assert tuple(pixels[rows[0], cols[0], :3]) != (expected.red(), expected.green(), expected.blue())  # faded
    first = next(s for s in held if s.own)
    rows, cols = np.nonzero(drawn.slot_index == m.slots.index(first))
    text = panel.describe_at(QPointF(cols[0] + 0.5, rows[0] + 0.5))
    assert f"slot {first.slot}" in text and "shared: " in text and "pane" in text
    assert "RAM tier" in panel.ram_label.text()


def test_a_stream_per_sequence_is_drawn_as_a_band_each():
    from app.engine.cell_map import CellMap, SlotCells

    slots = tuple(SlotCells(i, f"c{i}", None, 100 * i, 0, (), (), 100 * i, SlotState.KEPT) for i in range(4))
    drawn = lay_out(CellMap(n_cells=4 * 512, streams=True, slots=slots), cols=64)
    assert list(drawn.cell_counts(4)) == [0, 100, 200, 300]
    assert drawn.slot_index.shape == (4 * 8 + 3, 64)  # 8 rows a stream, a blank row between two
    assert int((drawn.slot_index == FREE).sum()) == 4 * 512 - 600
