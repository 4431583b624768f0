"""The KV cells dock: opened from the toolbar by mouse, it draws the engine's cell map at a scale that
shows the used cells (a row per slot, as wide as the longest), each in its pane's colour, a shared
prefix hatched, a picture's cells cross-hatched, the whole pool as a bar, and says in words what the
picture shows and whose a cell is."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from pictures import png
from PySide6.QtCore import QPointF, QRect, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFileDialog, QPushButton, QToolBar, QToolButton
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.cell_map import CellMap, SavedChat, SlotCells, SlotState
from app.ui import theme
from app.ui.docks.kv_map import KVMapPanel, extent_for, lay_out

pytestmark = pytest.mark.gui

SYSTEM_LIKE = "Once upon a time, in a village by the sea, there lived an old fisherman named Tom. " * 8


def toolbar_button(window, action):
    bar = window.findChild(QToolBar, "main-toolbar")
    return next(b for b in bar.findChildren(QToolButton) if b.defaultAction() is action)


def rgb(colour) -> tuple[int, int, int]:
    return colour.red(), colour.green(), colour.blue()


def used_share(panel) -> float:
    """Of the slots' rows drawn, the share of pixels in a colour that is neither free nor background."""
    t = theme.current()
    blank = {rgb(t.base), rgb(theme.blend(t.base, t.text, 0.12))}
    bands = [panel.picture.pixels[r.top : r.top + r.height, :, :3] for r in panel.layout_now.rows if r.slot >= 0]
    pixels = np.concatenate(bands).reshape(-1, 3)
    return float(np.mean([tuple(p) not in blank for p in map(tuple, pixels)]))


def hatched(panel, row) -> bool:
    """The row's first pixels alternate between two colours, as the shared prefix's stripes do."""
    head = panel.picture.pixels[row.top : row.top + row.height, : panel.layout_now.span(row.shared), :3]
    return len({tuple(p) for p in head.reshape(-1, 3)}) == 2


def fits(label) -> bool:
    """The label's words, wrapped at its width, need no more height than it has (nothing is cut)."""
    rect = label.contentsRect()
    needed = label.fontMetrics().boundingRect(QRect(0, 0, rect.width(), 10_000), Qt.TextFlag.TextWordWrap, label.text())
    return needed.height() <= rect.height() and needed.width() <= rect.width()


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
        await until(lambda: fits(window.kv_map.explain_label), what="the words laid out")
        return window, m

    window, m = run_tiny_window(scenario, panes=4)
    panel = window.kv_map
    drawn = panel.layout_now
    keys = {p.session.key: p.session.colour for p in window.panes}
    held = [s for s in m.slots if s.conversation_id in keys]
    assert len(held) == 4 and all(s.state is SlotState.KEPT for s in held)
    assert all(s.shared > 100 for s in held)  # the broadcast's common prompt: one copy, shared
    rows = {m.slots[r.slot].conversation_id: r for r in drawn.rows if r.slot >= 0}
    assert set(keys) <= set(rows) and drawn.extent < m.stream_cells  # scaled to the longest chat, not the pool
    assert used_share(panel) >= 0.3
    pixels = panel.picture.pixels
    for s in held:  # a pane's row: its shared prefix hatched, then its own cells in its colour, faded (kept)
        row = rows[s.conversation_id]
        assert hatched(panel, row)
        own = pixels[row.top, drawn.span(row.cells) - 1, :3]
        expected = theme.blend(
            panel.colour_of(s.conversation_id), theme.blend(theme.current().base, theme.current().text, 0.12), 0.55
        )
        assert tuple(own) == rgb(expected)
    assert "Hatched: a prefix shared" in panel.explain_label.text() and "Faded: kept" in panel.explain_label.text()
    assert fits(panel.explain_label) and fits(panel.counters_label)
    assert "pushed out" in panel.counters_label.text() and "pushed out" in panel.counters_label.toolTip()
    first = held[0]
    row = rows[first.conversation_id]
    text = panel.describe_at(QPointF(0.1, row.top + 0.5))  # the first pixel's start: token 1 at any scale
    assert text.startswith(panel.name_of(first.conversation_id)) and "pane" in text
    assert "token 1 of" in text and "the same cell as pane" in text  # shared with whom
    assert "RAM tier" in panel.ram_label.text()
    bar = panel.describe_at(QPointF(1.5, drawn.bar_top + 1))
    assert bar.startswith("the whole pool")


def panel_on(qtbot, m: CellMap, size=(360, 260)) -> KVMapPanel:
    """A panel drawing `m` at `size`, with a pane per chat "c0", "c1", ... in the theme's colours."""
    labels = {f"c{i}": (c, f"pane {i + 1} “chat {i + 1}”") for i, c in enumerate(("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"))}
    panel = KVMapPanel(SimpleNamespace(is_running=True, cell_map_of=lambda model: m), lambda: labels)
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    panel.refresh()
    return panel


def test_300_used_cells_of_a_stream_of_8192_fill_most_of_their_rows(qtbot):
    cells = (300, 280, 120, 0)
    slots = tuple(SlotCells(i, f"c{i}", None, n, 0, (), (), n, SlotState.KEPT) for i, n in enumerate(cells))
    saved = (SavedChat("c3", 250, 3_000_000),)
    panel = panel_on(qtbot, CellMap(n_cells=4 * 8192, streams=True, slots=slots, saved=saved))
    drawn = panel.layout_now
    assert drawn.extent == 300 and [r.slot for r in drawn.rows] == [0, 1, 2, -1]  # no row for the empty slot
    assert drawn.span(300) == drawn.width and used_share(panel) > 0.7
    assert all(r.height >= 8 for r in drawn.rows)
    text = panel.explain_label.text()
    assert "(+ 7,892 free in each stream, not drawn)" in text and "Striped: saved to RAM" in text
    qtbot.waitUntil(lambda: fits(panel.explain_label) and fits(panel.counters_label), timeout=2000)
    assert "pane 2 “chat 2”: token 1 of 280" in panel.describe_at(QPointF(0, drawn.rows[1].top))
    assert "free: 8,072 cells of pane 3" in panel.describe_at(QPointF(drawn.width - 1, drawn.rows[2].top))
    assert "saved to RAM, 250 tokens" in panel.describe_at(QPointF(0, drawn.rows[3].top))
    assert "slot 3's stream" in panel.describe_at(QPointF(drawn.width - 1, drawn.bar_top))


def test_a_running_reply_and_a_prefix_shared_in_one_pool_are_told_apart_on_hover(qtbot):
    a = SlotCells(0, "c0", "r0", 400, 150, (1,), (150,), 400, SlotState.RUNNING, prompt_cells=320)
    b = SlotCells(1, "c1", None, 200, 150, (0,), (150,), 50, SlotState.KEPT)
    panel = panel_on(qtbot, CellMap(n_cells=4096, streams=False, slots=(a, b)))
    drawn = panel.layout_now
    assert drawn.extent == 400 and all(hatched(panel, r) for r in drawn.rows)
    head = panel.describe_at(QPointF(0, drawn.rows[1].top))
    assert head.startswith("pane 2 “chat 2”: token 1 of 200") and "the same cell as pane 1 “chat 1”" in head
    tail = panel.describe_at(QPointF(drawn.width - 1, drawn.rows[0].top))
    assert "in the reply being written (from token 321)" in tail and "same cell" not in tail
    assert panel.describe_at(QPointF(drawn.width - 1, drawn.rows[1].top)) is None  # past its end: nothing
    assert "(3,646 free in the pool, not drawn)" in panel.explain_label.text()


def test_the_full_width_is_the_longest_row_rounded_up_and_no_more_than_a_stream():
    assert extent_for(0, 8192) == 64 and extent_for(300, 8192) == 300 and extent_for(310, 8192) == 400
    assert extent_for(9000, 8192) == 9000 and extent_for(5000, 6000) == 5000 and extent_for(5100, 6000) == 6000
    slots = tuple(SlotCells(i, f"c{i}", None, 100, 0, (), (), 100, SlotState.KEPT) for i in range(40))
    drawn = lay_out(CellMap(n_cells=40 * 512, streams=True, slots=slots), 300, 80)
    assert drawn.hidden and drawn.rows[-1].top + drawn.rows[-1].height <= drawn.bar_top < 80  # the rest said in words


def colours_in(panel, row, first: int, end: int) -> set[tuple[int, int, int]]:
    """The colours drawn in `row` over the columns of cells [first, end)."""
    drawn = panel.layout_now
    band = panel.picture.pixels[row.top : row.top + row.height, drawn.span(first) + 1 : drawn.span(end) - 1, :3]
    return {tuple(int(v) for v in p) for p in band.reshape(-1, 3)}


def longest_solid_run(panel, row, first: int, end: int, colour) -> int:
    """The most pixels side by side in `colour` on one pixel row of `row` over cells [first, end)."""
    drawn = panel.layout_now
    band = panel.picture.pixels[row.top : row.top + row.height, drawn.span(first) + 1 : drawn.span(end) - 1, :3]
    best = 0
    for line in np.all(band == rgb(colour), axis=-1):
        run = 0
        for on in line:
            run = run + 1 if on else 0
            best = max(best, run)
    return best


def test_a_pictures_cells_are_cross_hatched_shared_or_not_and_say_so_on_hover(qtbot):
    a = SlotCells(0, "c0", "r0", 400, 150, (1,), (150,), 400, SlotState.RUNNING, prompt_cells=320, pictures=((20, 84),))
    b = SlotCells(1, "c1", None, 200, 150, (0,), (150,), 50, SlotState.KEPT, pictures=((20, 84),))
    c = SlotCells(2, "c2", "r2", 300, 0, (), (), 300, SlotState.RUNNING, prompt_cells=280, pictures=((10, 74), (200, 216)))
    panel = panel_on(qtbot, CellMap(n_cells=4096, streams=False, slots=(a, b, c)), size=(460, 300))
    drawn = panel.layout_now
    base = theme.current().base
    row_a, _, row_c = drawn.rows
    blue, green = panel.colour_of("c0"), panel.colour_of("c2")
    faint = rgb(theme.blend(green, base, 0.7))
    # a picture: the pane's colour in thin lines both ways over a faint fill; plain cells solid
    assert colours_in(panel, row_c, 10, 74) == {rgb(green), faint}
    assert colours_in(panel, row_c, 80, 190) == {rgb(green)}
    assert longest_solid_run(panel, row_c, 10, 74, green) == 1  # lines, not stripes
    # a picture in a shared prefix: the shared stripes stay over it, the cross-hatch between them
    shared_picture = colours_in(panel, row_a, 20, 84)
    assert shared_picture == {rgb(blue), rgb(theme.blend(blue, base, 0.7))}
    assert longest_solid_run(panel, row_a, 20, 84, blue) >= 3
    assert colours_in(panel, row_a, 90, 145) == {rgb(blue), rgb(theme.blend(blue, base, 0.6))}  # the shared hatch
    # the words: on hover, under the picture, and row by row
    middle = QPointF((drawn.span(20) + drawn.span(84)) / 2, row_a.top + 1)
    text = panel.describe_at(middle)
    assert "a picture: 64 cells (tokens 21–84)" in text and "the same cell as pane 2 “chat 2”" in text
    second = panel.describe_at(QPointF((drawn.span(200) + drawn.span(216)) / 2, row_c.top + 1))
    assert "picture 2 of 2: 16 cells (tokens 201–216)" in second
    assert "picture" not in panel.describe_at(QPointF(drawn.span(150), row_c.top + 1))
    assert "Cross-hatched: a picture's cells (striped too where shared)." in panel.explain_label.text()
    legend = panel.legend_label.text()
    assert "400 cells (slot 0), a picture in 64 of them" in legend and "2 pictures in 80 of them" in legend


def test_a_picture_sent_from_two_panes_is_drawn_cross_hatched_in_both_rows(
    run_tiny_window, tiny_mmproj_path, tmp_path, monkeypatch, qtbot
):
    picture = tmp_path / "red.png"
    picture.write_bytes(png(40, 30, seed=1))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *a, **k: ([str(picture)], "")))

    async def scenario(window):
        qtbot.mouseClick(toolbar_button(window, window.kv_map_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        set_params(window, TINY_QUICK.with_(max_tokens=4))
        for pane in window.panes:  # the same picture attached by mouse in each pane, then sent
            qtbot.mouseClick(pane.attach_button, Qt.MouseButton.LeftButton)
            qtbot.keyClicks(pane.input, "What is in it?")
            qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: all(p.chat.messages and not p.is_busy for p in window.panes), what="replies")
        m = window.client.cell_map_of()
        await until(lambda: window.kv_map.shown is m, what="the idle map drawn")
        return window, m

    window, m = run_tiny_window(scenario, panes=2, mmproj=tiny_mmproj_path)
    panel = window.kv_map
    drawn = panel.layout_now
    rows = {m.slots[r.slot].conversation_id: r for r in drawn.rows if r.slot >= 0}
    for pane in window.panes:
        s = next(s for s in m.slots if s.conversation_id == pane.session.key)
        (first, end), *more = s.pictures
        assert not more and end - first == 16  # the synthetic projector's tokens
        row = rows[pane.session.key]
        solid = tuple(int(v) for v in panel.picture.pixels[row.top, drawn.span(s.cells) - 1, :3])  # its last cell
        fill = rgb(theme.blend(QColor(*solid), theme.current().base, 0.7))
        assert colours_in(panel, row, first, end) == {solid, fill}  # cross-hatched
        assert fill not in colours_in(panel, row, end, s.cells)  # the text after it: not
        point = QPointF((drawn.span(first) + drawn.span(end)) / 2, row.top + 1)
        assert f"a picture: 16 cells (tokens {first + 1}–{end})" in panel.describe_at(point)
    assert "Cross-hatched: a picture's cells" in panel.explain_label.text()
