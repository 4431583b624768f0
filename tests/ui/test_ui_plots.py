"""The live plots are built from their table: a new plot is one `PlotSpec` and its series. The drafts
plot is checked on what a real engine that speculates reports."""

from __future__ import annotations

import html
import time

import numpy as np
import pytest
from helpers import Started, run, user
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPalette
from PySide6.QtWidgets import QWidget

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import SpecType
from app.engine.sampling.params import GREEDY
from app.engine.stats import RequestStats
from app.ui.docks.plot_specs import PLOTS, LineSpec, PlotSpec, PointsSpec
from app.ui.docks.plots import MIN_VIEW_HEIGHT, RIGHT_AXIS_WIDTH, PlotsPanel
from app.ui.theme import contrast, dark_palette
from app.workspace.metrics import MetricsStore
from app.workspace.workspace import PANE_COLOURS

EXTRA = PlotSpec(
    "extra",
    "Extra tokens per pane",
    "tok",
    per_pane=True,
    series=(LineSpec("counted", "tok_rate"), PointsSpec("first", "ttft", size=5)),
)
STEPS = PlotSpec(
    "steps", "Engine: step time", "s", per_pane=False, series=(LineSpec("step", "engine_rate", "#00aa00"),), log_y=True
)


@pytest.mark.gui
def test_the_panel_draws_the_table_in_order(qtbot):
    panel = PlotsPanel(MetricsStore())
    qtbot.addWidget(panel)
    rows = [panel.ci.getItem(row, 0) for row in range(len(PLOTS))]
    assert all(plot.titleLabel.text.startswith(html.escape(spec.title)) for plot, spec in zip(rows, PLOTS))
    assert all(f"({spec.unit}" in plot.titleLabel.text for plot, spec in zip(rows, PLOTS) if spec.unit)
    assert rows == [getattr(panel, f"{spec.name}_plot") for spec in PLOTS]
    assert panel.ci.getItem(len(PLOTS), 0) is panel.legend
    assert panel.ci.getItem(len(PLOTS) + 1, 0) is panel.fold_note


@pytest.mark.gui
def test_a_new_plot_is_one_entry_with_its_series(qtbot):
    metrics = MetricsStore()
    pane = metrics.add_pane("p")
    specs = (*PLOTS, EXTRA, STEPS)
    panel = PlotsPanel(metrics, specs=specs)
    qtbot.addWidget(panel)
    panel.resize(400, 1200)  # room for every row
    panel.add_pane("p", "#1f77b4")
    titles = [panel.ci.getItem(row, 0).titleLabel.text for row in range(len(specs))]
    assert all(title.startswith(html.escape(spec.title)) for title, spec in zip(titles, specs))
    extra, steps = panel.extra_plot, panel.steps_plot
    counted, step = panel.pane_curves["p"]["counted"], panel.engine_curves["step"]
    assert all(item in extra.items for item in counted.items) and panel.point_sets["first"] in extra.items
    assert all(item in steps.items for item in step.items)
    assert step.body.items[0].pen().color().name() == "#00aa00"
    assert counted.body.items[0].pen().color().name() == "#1f77b4"  # a pane's line: its pane's colour

    now = panel.t0
    for _ in range(20):
        now += 0.1
        pane.tok_rate.push(now, 3.0)
        metrics.engine_rate.push(now, 100.0)
        panel.refresh(now)
    pane.ttft.push(now, 0.5)
    panel.refresh(now)
    x, y = counted.getData()
    assert len(x) == 20 and set(y) == {3.0}  # fed from its ring, every tick
    assert set(step.getData()[1]) == {2.0}  # log10 on a log axis
    assert panel.points("p", "first")[1].tolist() == [0.5]
    assert extra.viewRange()[1] == pytest.approx([-0.1, 5.1])  # 0 to a round value, padded
    assert steps.viewRange()[1] == pytest.approx([1.98, 3.02])  # whole decades

    # the last plot shows the time axis, and every plot shows the same times
    assert steps.getAxis("bottom").isVisible() and steps.getAxis("bottom")._tickLevels[0][-1] == (0.0, "now")
    for row in range(len(specs) - 1):
        plot = panel.ci.getItem(row, 0)
        assert not plot.getAxis("bottom").isVisible()
        assert plot.viewRange()[0] == steps.viewRange()[0]

    panel.remove_pane("p")
    assert not any(item in extra.items for item in counted.items) and panel.points("p", "first")[0].size == 0


@pytest.mark.unit
def test_points_are_per_pane_only():
    with pytest.raises(ValueError, match="per pane"):
        PlotSpec("engine_points", "Engine", "", per_pane=False, series=(PointsSpec("x", "engine_rate", size=5),))


@pytest.mark.unit
def test_series_names_are_unique_among_the_panes_and_among_the_engine():
    for per_pane in (True, False):
        names = [series.name for spec in PLOTS if spec.per_pane is per_pane for series in spec.series]
        assert len(names) == len(set(names))


@pytest.mark.unit
def test_a_right_axis_needs_its_unit_and_its_points():
    with pytest.raises(ValueError, match="right axis"):
        PlotSpec("r", "R", "", per_pane=True, series=(PointsSpec("x", "ttft", size=5, right=True),))
    with pytest.raises(ValueError, match="right axis"):
        PlotSpec("r", "R", "", per_pane=True, series=(PointsSpec("x", "ttft", size=5),), right_unit="tok")


def _panel(qtbot, size: tuple[int, int], panes: int = 4) -> PlotsPanel:
    """A shown panel of `size` with `panes` panes, in the window's colours."""
    metrics = MetricsStore()
    panel = PlotsPanel(metrics)
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    for i in range(panes):
        metrics.add_pane(f"p{i}")
        panel.add_pane(f"p{i}", PANE_COLOURS[i], f"Chat {i + 1}")
    return panel


def _stream(panel: PlotsPanel, start: float, seconds: float, rate: float = 5.0) -> float:
    """Ticks at 10 Hz from `start` for `seconds`, every pane getting `rate` tokens/s and the engine
    stepping (none of either at rate 0), as the window's timer samples them; the time at the end."""
    metrics, now = panel.metrics, start
    for _ in range(round(10 * seconds)):
        now += 0.1
        for pane in metrics.panes.values():
            pane.tok_rate.push(now, rate)
        metrics.seqs_per_step.push(now, len(metrics.panes) if rate else 0.0)
        metrics.batch_limit.push(now, 8)
        panel.refresh(now)
    return now


def _colours_near(image, at, radius: int = 1) -> set[str]:
    return {
        image.pixelColor(at.x() + dx, at.y() + dy).name()
        for dx in range(-radius, radius + 1)
        for dy in range(-radius, radius + 1)
    }


@pytest.mark.gui
def test_panes_at_the_same_rate_are_each_a_line_and_a_band_in_their_colour(qtbot, qapp):
    panel = _panel(qtbot, (380, 600), panes=2)
    now = _stream(panel, panel.t0, 3.0)
    lower, upper = (panel.pane_curves[key]["rate"] for key in ("p0", "p1"))
    assert set(lower.getData()[1]) == {5.0} and set(upper.getData()[1]) == {10.0}  # stacked: the second on the first
    qapp.processEvents()
    image = panel.grab().toImage()
    view = panel.rate_plot.vb

    def at(y: float):  # a second ago, at `y`, on the panel
        return panel.mapFromScene(view.mapViewToScene(QPointF(-1.0 - (np.ceil(now - panel.t0) - (now - panel.t0)), y)))

    for key, colour, line, band in (("p0", PANE_COLOURS[0], 5.0, 2.5), ("p1", PANE_COLOURS[1], 10.0, 7.5)):
        assert colour in _colours_near(image, at(line)), key  # the line, drawn and not covered
        hues = abs(image.pixelColor(at(band)).hue() - QColor(colour).hue())
        assert min(hues, 360 - hues) < 10, key  # the band under it: its pane's, pale


@pytest.mark.gui
def test_a_prompts_kv_hit_is_plotted_at_its_first_token(qtbot):
    panel = _panel(qtbot, (380, 600), panes=1)
    metrics = panel.metrics
    metrics.track("r1", "p0", panel.t0)
    metrics.on_events([TokenEvent("r1", "Hi", 1, panel.t0 + 0.5, 7, cached=97, evaluated=3)])
    panel.refresh(panel.t0 + 0.6)
    x, y = panel.points("p0", "hit")
    assert x.tolist() == pytest.approx([0.5]) and y.tolist() == pytest.approx([97.0])  # while the reply streams
    assert metrics.panes["p0"].kv_hit_rate == pytest.approx(0.97)  # the readout says the newest point
    stats = RequestStats("r1", prompt_tokens=100, cached_tokens=97, evaluated_tokens=3, gen_tokens=2)
    metrics.on_events([TokenEvent("r1", "!", 1, panel.t0 + 0.7), FinishEvent("r1", FinishReason.STOP, "Hi!", stats)])
    panel.refresh(panel.t0 + 0.8)
    assert panel.points("p0", "hit")[1].tolist() == pytest.approx([97.0])  # and its end adds none


@pytest.mark.gui
def test_the_time_span_follows_the_activity(qtbot):
    panel = _panel(qtbot, (380, 600))
    now = _stream(panel, panel.t0, 2.0, rate=0)  # idle: the narrowest span
    now = _stream(panel, now, 6.0)  # a 6 s broadcast
    low, high = panel.rate_plot.viewRange()[0]
    assert high - low < 20 and panel.span == 10
    first = panel.pane_curves["p0"]["rate"].getData()[0][np.argmax(panel.pane_curves["p0"]["rate"].getData()[1] > 0)]
    assert first - np.ceil(now - panel.t0) > low  # the broadcast's start is in view
    assert all(plot.viewRange()[0] == [low, high] for plot in (panel.latency_plot, panel.batch_plot))
    ticks = panel.batch_plot.getAxis("bottom")._tickLevels[0]
    assert [label for _, label in ticks] == ["-10 s", "-8 s", "-6 s", "-4 s", "-2 s", "now"]
    now = _stream(panel, now, 30.0, rate=0)  # it scrolls left: the span widens to keep it
    assert panel.span == 60
    _stream(panel, now, 70.0, rate=0)  # out of sight: narrow again
    assert panel.span == 10


def _shown_rows(panel: PlotsPanel) -> list:
    return [getattr(panel, f"{spec.name}_plot") for spec in PLOTS if getattr(panel, f"{spec.name}_plot").isVisible()]


@pytest.mark.gui
def test_rows_fold_rather_than_shrink_below_a_legible_height(qtbot, qapp):
    panel = _panel(qtbot, (380, 300))
    _stream(panel, panel.t0, 3.0)
    qapp.processEvents()
    shown = _shown_rows(panel)
    assert 1 < len(shown) < 5  # the drafts row waits for drafts: five rows at most
    assert all(plot.vb.height() >= MIN_VIEW_HEIGHT for plot in shown)
    tops = sorted((plot.sceneBoundingRect().top(), plot.sceneBoundingRect().bottom()) for plot in shown)
    assert all(bottom <= next_top for (_, bottom), (next_top, _) in zip(tops, tops[1:]))  # none overlaps
    axis = shown[-1].getAxis("bottom")
    assert axis.isVisible() and axis.sceneBoundingRect().bottom() <= panel.fold_note.sceneBoundingRect().top()
    assert panel.fold_note.sceneBoundingRect().bottom() <= panel.height()  # all of it on the panel
    assert panel.fold_note.isVisible() and panel.fold_note.text.startswith(f"{5 - len(shown)} plots folded")
    kept = {spec.name for spec in PLOTS if getattr(panel, f"{spec.name}_plot") in shown}
    assert kept == {"rate", "engine"} and panel.folded == {"latency", "hit", "batch"}  # the least priority fold

    panel.resize(380, 760)  # the room back: every row again
    qapp.processEvents()
    assert len(_shown_rows(panel)) == 5 and not panel.folded and not panel.fold_note.isVisible()
    assert all(plot.vb.height() >= MIN_VIEW_HEIGHT for plot in _shown_rows(panel))
    assert panel.batch_plot.getAxis("bottom").isVisible()


def _tick_labels(axis) -> list:
    """Where an axis draws its tick labels, in the scene (what its paint draws)."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        return [axis.mapRectToScene(rect) for rect, _, _ in axis.generateDrawSpecs(painter)[2]]
    finally:
        painter.end()


@pytest.mark.gui
@pytest.mark.parametrize("width", [320, 380])
def test_units_are_in_the_titles_clear_of_the_tick_labels(qtbot, qapp, width):
    panel = _panel(qtbot, (width, 700))
    _stream(panel, panel.t0, 2.0)
    qapp.processEvents()
    for spec in PLOTS:
        plot = getattr(panel, f"{spec.name}_plot")
        if not plot.isVisible():
            continue
        assert f"({spec.unit}" in plot.titleLabel.text or not spec.unit
        title = plot.titleLabel.item.sceneBoundingRect()  # the text itself
        assert title.left() >= 0 and title.right() <= panel.width()  # whole
        for name in ("left", "right", "bottom"):
            axis = plot.getAxis(name)
            if axis.isVisible():
                assert not any(title.intersects(tick) for tick in _tick_labels(axis)), (spec.name, name)
                assert not axis.label.isVisible()  # no rotated unit over the ticks


@pytest.mark.gui
def test_the_batch_limit_is_labelled_in_a_colour_no_pane_has(qtbot):
    panel = _panel(qtbot, (380, 700))
    _stream(panel, panel.t0, 2.0)
    title = panel.batch_plot.titleLabel.text
    pen = panel.engine_curves["limit"].body.items[0].pen()
    assert "dashed: batch limit (8)" in title and pen.style() == Qt.PenStyle.DashLine
    assert pen.color().name() in title  # the words in the line's colour
    limit = pen.color()

    def distance(colour: str) -> float:
        c = QColor(colour)
        return ((c.red() - limit.red()) ** 2 + (c.green() - limit.green()) ** 2 + (c.blue() - limit.blue()) ** 2) ** 0.5

    assert min(distance(colour) for colour in PANE_COLOURS) > 80


@pytest.mark.gui
@pytest.mark.parametrize("dark", [False, True])
def test_titles_are_in_the_themes_text_colour(qtbot, dark):
    dock = QWidget()  # the panel takes its colours from where it is made
    qtbot.addWidget(dock)
    if dark:
        dock.setPalette(dark_palette())
    panel = PlotsPanel(MetricsStore(), dock)
    for spec in PLOTS:
        colour = QColor(getattr(panel, f"{spec.name}_plot").titleLabel.opts["color"])
        assert colour == panel.palette().color(QPalette.ColorRole.Text)
        assert contrast(colour, panel.backgroundBrush().color()) >= 4.5


REPEATING = "repeat after me: " + "the mill and the river " * 6  # greedy, the tiny model's reply repeats: drafts hit


async def _replies(config, asks) -> tuple[MetricsStore, list]:
    """Run `asks` ((pane, params), ...) one after the other on an engine of `config`, with a
    MetricsStore listening as the window's does; its finals."""
    metrics = MetricsStore()
    finals = []
    async with Started(config) as client:
        client.add_listener(metrics.on_events)
        for i, (pane, params) in enumerate(asks):
            metrics.track(f"r{i}", pane, time.monotonic())
            finals.append(await client.complete(user(REPEATING), params, conversation_id=f"{pane}{i}", request_id=f"r{i}"))
    return metrics, finals


@pytest.mark.gui
def test_the_drafts_plot_shows_each_drafted_replys_acceptance_and_tokens_per_step(qtbot, tiny_config):
    params = GREEDY.with_(max_tokens=80, ignore_eos=True)
    asks = [("a", params), ("a", params.with_(max_tokens=60)), ("b", params.with_(speculate=False))]
    metrics, finals = run(_replies(tiny_config.with_(spec_type=SpecType.NGRAM), asks))
    drafted = [f.stats for f in finals[:2]]
    assert all(st.accepted_tokens > 0 for st in drafted) and finals[2].stats.drafted_tokens == 0

    panel = PlotsPanel(metrics)
    qtbot.addWidget(panel)
    panel.resize(400, 700)
    panel.show()
    assert not panel.drafts_plot.isVisible()  # nothing drafted yet: the row stays folded away
    for pane, colour in (("a", "#1f77b4"), ("b", "#d62728")):
        panel.add_pane(pane, colour)
    panel.refresh(time.monotonic())
    qtbot.waitUntil(lambda: panel.drafts_plot.isVisible() and panel.drafts_plot.height() > 60)

    # a point per drafted reply, at its end: the share accepted (in %), and gen / (gen - accepted)
    x, y = panel.points("a", "accepted")
    assert np.allclose(x, [st.t_finish - panel.t0 for st in drafted])
    assert np.allclose(y, [100 * st.accepted_tokens / st.drafted_tokens for st in drafted])
    steps = [st.gen_tokens / (st.gen_tokens - st.accepted_tokens) for st in drafted]
    assert np.allclose(panel.points("a", "step_tokens")[1], steps) and min(steps) > 1
    assert panel.points("b", "accepted")[0].size == panel.points("b", "step_tokens")[0].size == 0  # not zeros
    accepted, step_tokens = panel.point_sets["accepted"], panel.point_sets["step_tokens"]
    assert np.allclose(accepted.getData()[1], y) and np.allclose(step_tokens.getData()[1], steps)
    assert [b.color().name() for b in accepted.data["brush"]] == ["#1f77b4"] * 2  # the pane's colour
    assert step_tokens.opts["symbol"] == "t1" and accepted.opts["symbol"] == "o"

    # acceptance against the left axis in %, tokens per step against the right one, fitted to them
    drafts = panel.drafts_plot
    assert accepted in drafts.items and step_tokens.getViewBox() is panel.right_views["drafts"]
    assert drafts.viewRange()[1] == [0, 105]
    low, high = panel.right_views["drafts"].viewRange()[1]
    assert low < 0 < max(steps) < high <= 2.1 * max(steps)
    assert drafts.titleLabel.text.endswith("(% | tok/step)")  # the units in the title, left | right

    # every row leaves the right axis's room, so "now" is at the same x in all of them
    def view_right_edges():
        return {round(plot.vb.sceneBoundingRect().right()) for plot in (panel.rate_plot, drafts, panel.batch_plot)}

    qtbot.waitUntil(lambda: len(view_right_edges()) == 1)
    assert panel.width() - view_right_edges().pop() >= RIGHT_AXIS_WIDTH
    assert panel.right_views["drafts"].sceneBoundingRect() == drafts.vb.sceneBoundingRect()

    # the readout's figure is the last reply's
    assert metrics.panes["a"].tokens_per_step == pytest.approx(steps[-1])


@pytest.mark.gui
def test_without_drafts_the_drafts_plot_stays_folded_away(qtbot, tiny_config):
    metrics, finals = run(_replies(tiny_config, [("a", GREEDY.with_(max_tokens=40, ignore_eos=True))]))
    assert finals[0].stats.drafted_tokens == 0  # speculation off, as by default
    panel = PlotsPanel(metrics)
    qtbot.addWidget(panel)
    panel.resize(400, 700)
    panel.show()
    panel.add_pane("a", "#1f77b4")
    panel.refresh(time.monotonic())
    qtbot.wait(50)
    assert len(panel.points("a", "ttft")[0]) == 1  # the reply was plotted
    assert not panel.drafts_plot.isVisible() and panel.drafts_plot.height() == 0 and len(metrics.panes["a"].draft_accepted) == 0
    assert not panel.rate_plot.getAxis("right").isVisible()  # no room kept for an axis not shown


@pytest.mark.gui
def test_a_log_axis_says_its_values_not_a_power_of_ten_times_a_scale(qtbot):
    metrics = MetricsStore()
    pane = metrics.add_pane("p")
    panel = PlotsPanel(metrics)
    qtbot.addWidget(panel)
    panel.add_pane("p", "#1f77b4")
    pane.ttft.push(panel.t0 + 1, 0.035)  # 35 ms: its decade is 0.01 to 0.1 s
    panel.refresh(panel.t0 + 1)
    axis = panel.latency_plot.getAxis("left")
    assert panel.latency_plot.viewRange()[1] == pytest.approx([-2.02, -0.98])
    assert axis.autoSIPrefixScale == 1 and "x0.001" not in axis.labelString()
