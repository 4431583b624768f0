"""The in-app benchmark view and the engine panel's scheduling controls, on the tiny model (the
benchmark ignores the end of a reply: every configuration writes as many tokens, whatever they say)."""

from __future__ import annotations

import csv
import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QToolButton
from ui_fixtures import until

from app.engine.params import Policy, ServingMode
from app.ui.docks.benchmark import BenchmarkPanel, bar_label, why

pytestmark = pytest.mark.gui


def tiny(view: BenchmarkPanel) -> None:
    view.parallel_counts.setText("2")
    view.max_tokens.setValue(6)
    view.turns.setValue(1)
    view.shared_system.setChecked(False)


def engine_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "llama-engine")


def test_the_benchmark_view_runs_a_tiny_sweep_to_the_end_and_shows_its_chart(run_tiny_window, tmp_path, qtbot, monkeypatch):
    target = tmp_path / "bench.png"
    monkeypatch.setattr("app.ui.docks.benchmark.QFileDialog.getSaveFileName", lambda *args: (str(target), ""))
    # its engines take a thread per core: one, as on a one-core machine (two spin at llama.cpp's barriers,
    # and on 2 busy cores each 6-token run took 1.2 s instead of 10 ms)
    monkeypatch.setattr("os.cpu_count", lambda: 1)

    async def scenario(window):
        window.bench_dock.show()
        view = window.benchmark_panel
        tiny(view)
        outcomes = []
        view.sigFinished.connect(outcomes.append)
        qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
        assert view.is_running and view.cancel_button.isEnabled()
        await until(lambda: outcomes, timeout=120, what="the sweep")
        window.resize(window.width(), 480)  # a short dock: the table scrolls
        await until(lambda: view.table.verticalScrollBar().isVisible(), 5, "the table to scroll")
        qtbot.mouseClick(view.export_button, Qt.MouseButton.LeftButton)
        return view, outcomes

    view, outcomes = run_tiny_window(scenario, panes=1)
    png, csv_path = target, target.with_suffix(".csv")
    assert outcomes == ["done"] and view.progress.value() == 100
    # the guide's rows: one sequence, then 2 parallel as a static batch, and continuous without and with KV reuse
    configurations = [(r["configuration"], r["parallel"], r["mode"]) for r in view.runs]
    assert configurations == [
        ("one sequence", 1, "batched"),
        ("static + KV reuse", 2, "static"),
        ("continuous, no KV reuse", 2, "batched"),
        ("continuous + KV reuse", 2, "batched"),
    ]
    assert all(r["gen_tokens"] == 6 * r["parallel"] for r in view.runs)
    assert view.table.rowCount() == 4 and view.table.item(1, 0).text() == "static + KV reuse"
    heights = list(view.bars.opts["height"])
    assert heights == [r["agg_tok_s"] for r in view.runs] and min(heights) > 0
    assert png.stat().st_size > 5000
    # every row in the picture, though the dock showed only some
    table = view.table
    hidden = table.horizontalHeader().height() + table.verticalHeader().length() + 2 * table.frameWidth() - table.height()
    assert hidden > 0 and QImage(str(png)).height() == view.height() + hidden
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["agg_tok_s"]) for r in rows] == heights


def test_cancel_stops_the_benchmark_and_leaves_no_engine_behind(run_tiny_window):
    async def scenario(window):
        view = window.benchmark_panel
        tiny(view)
        view.max_tokens.setValue(1024)  # the longest sweep it takes: some seconds on the tiny model
        view.turns.setValue(8)
        before = engine_threads()
        outcomes = []
        view.sigFinished.connect(outcomes.append)
        view.run_button.click()
        await until(lambda: engine_threads() > before, what="the benchmark's engine")
        view.cancel_button.click()
        await until(lambda: outcomes, timeout=30, what="the cancel")
        await until(lambda: engine_threads() == before, timeout=30, what="the engine to close")
        return view, outcomes

    view, outcomes = run_tiny_window(scenario, panes=1)
    assert outcomes == ["cancelled"] and view.run_button.isEnabled()
    assert len(view.runs) < 3


def test_scheduling_controls_reach_the_engine_live(run_tiny_window):
    async def scenario(window):
        panel = window.engine_panel
        panel.policy.setCurrentIndex(panel.policy.findData(Policy.SHORTEST_FIRST.value))
        await until(lambda: window.client.config.policy is Policy.SHORTEST_FIRST, what="the policy")
        panel.adaptive.setChecked(True)
        panel.itl_target.setValue(120)
        await until(lambda: window.client.config.itl_target_ms == 120, what="the target")
        engine = await window.client.call(lambda e: (e.scheduler.policy, e.scheduler.limits.itl_target_s))
        stored = window.settings.engine_config(window.client.config.model_path)
        panel.adaptive.setChecked(False)
        await until(lambda: window.client.config.itl_target_ms is None, what="a fixed batch")
        limits = await window.client.call(lambda e: e.scheduler.limits)
        return engine, stored, limits, panel.itl_target_label.text()

    engine, stored, limits, label = run_tiny_window(scenario, panes=1)
    assert engine == (Policy.SHORTEST_FIRST, 0.120)
    assert (stored.policy, stored.itl_target_ms) == (Policy.SHORTEST_FIRST, 120)
    assert limits is None and label == "off"


def test_static_serving_is_switched_live_from_the_panel_and_the_status_line_says_so(run_tiny_window, qtbot):
    async def scenario(window):
        panel = window.engine_panel
        window.engine_dock.show()
        qtbot.mouseClick(panel.static, Qt.MouseButton.LeftButton)
        await until(lambda: window.client.config.mode is ServingMode.STATIC, what="static serving")
        window.tick()
        window.refresh_readouts()
        assert window.status_label.text().startswith("static · running 0 · waiting 0 · ")
        panel.static_window.setValue(120)
        await until(lambda: window.client.config.static_window_ms == 120, what="the window")
        engine = await window.client.call(lambda e: (e.scheduler.static, e.scheduler.static_window_s))
        stored = window.settings.engine_config(window.client.config.model_path)
        qtbot.mouseClick(panel.batched, Qt.MouseButton.LeftButton)
        await until(lambda: window.client.config.mode is ServingMode.BATCHED, what="batched serving")
        return engine, stored, await window.client.call(lambda e: e.scheduler.static)

    engine, stored, static_after = run_tiny_window(scenario, panes=1)
    assert engine == (True, 0.120) and not static_after
    assert (stored.mode, stored.static_window_ms) == (ServingMode.STATIC, 120)


def test_the_benchmark_button_brings_its_view_forward_and_a_bad_count_is_explained(run_tiny_window):
    async def scenario(window):
        button = next(b for b in window.findChildren(QToolButton) if b.defaultAction() is window.bench_dock.toggleViewAction())
        QTest.mouseClick(button, Qt.MouseButton.LeftButton)
        await until(lambda: not window.bench_dock.visibleRegion().isEmpty(), what="the benchmark in front")
        assert window.plots_dock.visibleRegion().isEmpty()  # tabbed behind it, not in front of it
        view = window.benchmark_panel
        view.parallel_counts.clear()
        QTest.keyClicks(view.parallel_counts, "4, eight")
        QTest.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
        assert not view.is_running
        assert view.status.text() == "Parallel counts: whole numbers of 2 or more, e.g. 4, 8, 16"

    run_tiny_window(scenario, panes=1)


def _run(parallel: int, mode: str, tok_s: float, kv_reuse: bool = True) -> dict:
    return {"parallel": parallel, "mode": mode, "kv_reuse": kv_reuse, "agg_tok_s": tok_s}


def test_each_benchmark_row_says_why_from_the_rows_it_compares_with():
    single, static = _run(1, "batched", 60.0), _run(4, "static", 100.0)
    plain, continuous = _run(4, "batched", 80.0, kv_reuse=False), _run(4, "batched", 96.0)
    runs = [single, static, plain, continuous]
    assert why(single, runs) == "one reply at a time: the baseline"
    assert why(static, runs).startswith("1.04× continuous") and "idle slots cost little" in why(static, runs)
    slower = _run(4, "static", 70.0)
    assert why(slower, [single, slower, continuous]).startswith("0.73× continuous") and "cost little" not in why(
        slower, [single, slower, continuous]
    )
    assert "prompt computed again" in why(plain, runs)
    assert why(continuous, runs).startswith("1.60× one sequence")
    assert [bar_label(r) for r in runs] == ["1×", "4×\nstatic", "4×\nno reuse", "4×"]
