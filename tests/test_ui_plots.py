"""The live plots are built from their table: a new plot is one `PlotSpec` and its series."""

from __future__ import annotations

import pytest

from app.ui.plot_specs import PLOTS, LineSpec, PlotSpec, PointsSpec
from app.ui.plots import PlotsPanel
from app.workspace.metrics import MetricsStore

DRAFTS = PlotSpec(
    "drafts",
    "Draft tokens accepted per pane",
    "tok",
    per_pane=True,
    series=(LineSpec("drafted", "tok_rate"), PointsSpec("first", "ttft", size=5)),
)
STEPS = PlotSpec(
    "steps", "Engine: step time", "s", per_pane=False, series=(LineSpec("step", "engine_rate", "#00aa00"),), log_y=True
)


@pytest.mark.gui
def test_the_panel_draws_the_table_in_order(qtbot):
    panel = PlotsPanel(MetricsStore())
    qtbot.addWidget(panel)
    rows = [panel.ci.getItem(row, 0) for row in range(len(PLOTS))]
    assert [plot.titleLabel.text for plot in rows] == [spec.title for spec in PLOTS]
    assert [plot.getAxis("left").labelText for plot in rows] == [spec.unit for spec in PLOTS]
    assert rows == [getattr(panel, f"{spec.name}_plot") for spec in PLOTS]
    assert panel.ci.getItem(len(PLOTS), 0) is panel.legend


@pytest.mark.gui
def test_a_new_plot_is_one_entry_with_its_series(qtbot):
    metrics = MetricsStore()
    pane = metrics.add_pane("p")
    specs = (*PLOTS, DRAFTS, STEPS)
    panel = PlotsPanel(metrics, specs=specs)
    qtbot.addWidget(panel)
    panel.add_pane("p", "#1f77b4")
    assert [panel.ci.getItem(row, 0).titleLabel.text for row in range(len(specs))] == [spec.title for spec in specs]
    drafts, steps = panel.drafts_plot, panel.steps_plot
    drafted, step = panel.pane_curves["p"]["drafted"], panel.engine_curves["step"]
    assert all(item in drafts.items for item in drafted.items) and panel.point_sets["first"] in drafts.items
    assert all(item in steps.items for item in step.items)
    assert step.body.items[0].pen().color().name() == "#00aa00"
    assert drafted.body.items[0].pen().color().name() == "#1f77b4"  # a pane's line: its pane's colour

    now = panel.t0
    for _ in range(20):
        now += 0.1
        pane.tok_rate.push(now, 3.0)
        metrics.engine_rate.push(now, 100.0)
        panel.refresh(now)
    pane.ttft.push(now, 0.5)
    panel.refresh(now)
    x, y = drafted.getData()
    assert len(x) == 20 and set(y) == {3.0}  # fed from its ring, every tick
    assert set(step.getData()[1]) == {2.0}  # log10 on a log axis
    assert panel.points("p", "first")[1].tolist() == [0.5]
    assert drafts.viewRange()[1] == pytest.approx([-0.1, 5.1])  # 0 to a round value, padded
    assert steps.viewRange()[1] == pytest.approx([1.98, 3.02])  # whole decades

    # the last plot shows the time axis, and the others follow it
    assert steps.getAxis("bottom").isVisible() and steps.getAxis("bottom").labelText == "seconds ago"
    for row in range(len(specs) - 1):
        plot = panel.ci.getItem(row, 0)
        assert not plot.getAxis("bottom").isVisible()
        assert plot.getViewBox().linkedView(0) is steps.getViewBox()

    panel.remove_pane("p")
    assert not any(item in drafts.items for item in drafted.items) and panel.points("p", "first")[0].size == 0


@pytest.mark.unit
def test_points_are_per_pane_only():
    with pytest.raises(ValueError, match="per pane"):
        PlotSpec("engine_points", "Engine", "", per_pane=False, series=(PointsSpec("x", "engine_rate", size=5),))


@pytest.mark.unit
def test_series_names_are_unique_among_the_panes_and_among_the_engine():
    for per_pane in (True, False):
        names = [series.name for spec in PLOTS if spec.per_pane is per_pane for series in spec.series]
        assert len(names) == len(set(names))
