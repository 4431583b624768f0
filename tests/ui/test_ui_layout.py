"""The window's layout on a 1366x768 laptop screen with every dock open and eight panes streaming,
checked with the code behind `python -m app.ui.demo --geometry-json` (app/ui/window/layout_report.py): each
view shown keeps a size it can be read at, panes keep whole words and their readouts, the status
line is never "…". On the tiny model: what is checked is the layout."""

from __future__ import annotations

import asyncio

import pytest
from PySide6.QtWidgets import QDockWidget
from ui_fixtures import TINY_LONG, on_laptop, set_params, until

from app.ui.window.layout_report import layout_report
from app.ui.window.pane_grid import MIN_PANE_HEIGHT, MIN_PANE_WIDTH, grid_columns

pytestmark = pytest.mark.gui

MIN_PLOT = (150, 60)  # px of drawing area a plot is read at: below, its lines are a smear
MIN_TRANSCRIPT = (MIN_PANE_WIDTH - 30, 40)  # inside a pane's frame and scroll bar: a few lines of whole words


async def _each_tab_in_front(window):
    """Each dock brought to the front of its tabs in turn, laid out: the report of what shows then."""
    reports = []
    for dock in window.findChildren(QDockWidget):
        if dock.isVisible():
            dock.raise_()
            await laid_out()
            reports.append((dock.windowTitle(), layout_report(window)))
    return reports


async def laid_out() -> None:
    """Resizes and layouts delivered by the running loop (processing events by hand would re-enter
    the panes' reply tasks while they stream)."""
    for _ in range(3):
        await asyncio.sleep(0.05)


def _too_small(report) -> list[str]:
    """What is shown smaller than it can be read at, or wider than its dock (cut off at its edge)."""
    docks = {s.name: s.width for s in report if s.kind == "dock"}
    small = []
    for shown in report:
        least = {"plot": MIN_PLOT, "transcript": MIN_TRANSCRIPT}.get(shown.kind)
        if least and (shown.width < least[0] or shown.height < least[1]):
            small.append(f"{shown.kind} {shown.name}: {shown.width}x{shown.height}")
        dock = docks.get(shown.name.split(":")[0]) if shown.kind == "plot" else None
        if dock is not None and shown.width > dock:
            small.append(f"{shown.name}: {shown.width} px wide in a dock of {dock}")
    return small


def test_every_dock_open_on_a_laptop_screen_leaves_every_view_readable(run_tiny_window):
    async def scenario(window):
        room = on_laptop(window)
        window.docks.show(["all"])
        set_params(window, TINY_LONG)
        window.workspace.broadcast("Tell me a long story.")
        await until(lambda: all(window.metrics.panes[p.key].gen_tokens >= 2 for p in window.panes), what="eight streams")
        window.tick()
        window.refresh_readouts()
        reports = await _each_tab_in_front(window)
        window.stop_all()
        await until(lambda: window.workspace.is_idle)
        assert window.geometry() == room  # nothing pushed the window past the screen
        return reports

    reports = run_tiny_window(scenario, panes=8)
    assert len(reports) >= 3  # the docks of the three areas at least took their turn in front
    for front, report in reports:
        assert _too_small(report) == [], front
        docks = [s for s in report if s.kind == "dock"]
        assert len(docks) == 3, front  # one dock a side in front: the others are tabs behind it
        plots = [s for s in report if s.kind == "plot"]
        assert plots, front  # each dock with plots in front shows them
        readouts = [s for s in report if s.kind == "readout"]
        assert len(readouts) == 8 and all("tok/s" in s.text for s in readouts), front
        status = next(s for s in report if s.kind == "status" and s.name == "engine")
        assert status.text != "…" and status.text.startswith("continuous"), front


def test_the_panes_take_fewer_columns_rather_than_shrink_past_their_minimum(run_tiny_window):
    async def scenario(window):
        on_laptop(window)
        window.docks.show(["Chats", "Live plots"])
        await laid_out()
        grid = window.pane_grid
        narrow = grid.viewport().width()
        widths = [pane.width() for pane in window.panes]
        window.chats_dock.hide()
        window.plots_dock.hide()
        await laid_out()
        return narrow, grid.columns, widths, grid.viewport().width()

    narrow, wide_columns, widths, wide = run_tiny_window(scenario, panes=8)
    assert grid_columns(8, narrow) < 4 <= wide_columns == grid_columns(8, wide)
    assert min(widths) >= MIN_PANE_WIDTH


def test_rows_that_do_not_fit_scroll_rather_than_crush_the_panes(run_tiny_window):
    async def scenario(window):
        on_laptop(window)
        window.docks.show(["Compare"])  # a bottom dock as well as the two sides
        window.docks.show(["Engine", "Live plots"])
        await laid_out()
        return [pane.height() for pane in window.panes], window.pane_grid.verticalScrollBar().maximum()

    heights, scroll = run_tiny_window(scenario, panes=8)
    assert min(heights) >= MIN_PANE_HEIGHT and scroll >= 0


def test_a_dock_shown_from_the_view_menu_comes_to_the_front_of_its_tabs(run_tiny_window, qtbot):
    async def scenario(window):
        window.docks.show(["Live plots"])
        await laid_out()
        action = window.kv_map_dock.toggleViewAction()
        action.trigger()  # as the menu's entry does
        await laid_out()
        behind = [d.windowTitle() for d in window.tabifiedDockWidgets(window.kv_map_dock)]
        return window.kv_map_dock.visibleRegion().isEmpty(), window.plots_dock.visibleRegion().isEmpty(), behind

    kv_hidden, plots_hidden, behind = run_tiny_window(scenario, panes=2)
    assert not kv_hidden and plots_hidden and "Live plots" in behind


def test_a_bottom_dock_takes_its_share_of_the_height_and_the_panes_keep_theirs(run_tiny_window):
    async def scenario(window):
        on_laptop(window)
        window.docks.show_bottom(window.compare_dock)
        await laid_out()
        compare = window.compare_dock.height()
        window.batching.show_runs([])  # Show batching's result, which asks for more
        await laid_out()
        return compare, window.batching_dock.height(), window.height(), min(p.height() for p in window.panes)

    compare, result, height, pane = run_tiny_window(scenario, panes=4)
    assert compare <= 0.26 * height < 0.35 * height <= result <= 0.41 * height and pane >= MIN_PANE_HEIGHT
