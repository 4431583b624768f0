"""The window on the tiny model (what these tests check does not depend on what a model writes):
streaming, Stop, broadcast, sliders, plots, closing, bad input, a KV layout change told."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox, QPushButton, QToolBar
from ui_fixtures import TINY_LONG, TINY_QUICK, open_window, set_params, start_long_reply, until

from app.engine.events import FinishReason
from app.engine.params import OverflowPolicy
from app.ui.pane.params_editor import SLIDERS
from app.workspace.chat_store import NOTICE

pytestmark = pytest.mark.gui


def _spec(name):
    return next(s for s in SLIDERS if s.name == name)


def test_message_streams_reply(run_tiny_window):
    params = TINY_QUICK.with_(max_tokens=240)  # a quarter of a second: shown in pieces

    async def scenario(window):
        pane = window.panes[0]
        set_params(window, params)
        shown_while_busy = []
        pane.transcript.textChanged.connect(lambda: shown_while_busy.append(pane.is_busy))
        pane.input.setPlainText("Name three colours.")
        QTest.keyClick(pane.input, Qt.Key.Key_Return)  # Enter sends
        assert pane.is_busy and pane.input.toPlainText() == ""
        await until(lambda: not pane.is_busy, what="the reply")
        assert [m["role"] for m in pane.chat.messages] == ["user", "assistant", NOTICE]
        assert pane.chat.messages[1]["content"].strip()
        assert pane.chat.messages[2]["content"].startswith("cut at Max tokens (240)")  # not a silent end
        assert "cut at Max tokens (240)" in pane.transcript.toPlainText()
        assert sum(shown_while_busy) >= 2  # the reply appeared in pieces before it ended
        assert "Name three colours." in pane.transcript.toPlainText()

    run_tiny_window(scenario, panes=1)


def test_shift_enter_is_a_new_line(run_tiny_window):
    async def scenario(window):
        pane = window.panes[0]
        pane.input.setPlainText("one")
        pane.input.moveCursor(pane.input.textCursor().MoveOperation.End)
        QTest.keyClick(pane.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
        assert not pane.is_busy and pane.input.toPlainText() == "one\n"

    run_tiny_window(scenario, panes=1)


def test_ctrl_enter_sends_too(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        qtbot.keyClicks(pane.input, "Hi")
        qtbot.keyClick(pane.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert pane.is_busy and pane.input.toPlainText() == ""
        assert pane.chat.messages[0]["content"] == "Hi"
        await until(lambda: not pane.is_busy, what="the reply")

    run_tiny_window(scenario, panes=1)


def test_a_users_backticks_show_as_typed(run_tiny_window, qtbot):
    typed = ["use ``` to fence code", "```python print(1)``` inline, **not bold**"]

    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        for line in typed:
            qtbot.keyClicks(pane.input, line)
            qtbot.keyClick(pane.input, Qt.Key.Key_Return)
            await until(lambda: not pane.is_busy, what="the reply")
        document = pane.transcript.document()
        for line in typed:
            assert f"Copy\n{line}\n" in pane.transcript.toPlainText()  # whole under You  Copy: not cut at the backticks
            found = document.find(line)
            assert not found.isNull() and found.charFormat().fontFamilies() is None  # the text's font, not code's

    run_tiny_window(scenario, panes=1)


def test_stop_cancels_the_reply(run_tiny_window):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_LONG)
        finals = []
        pane.sigReplyFinished.connect(finals.append)
        pane.session.send("Write a long story about a dragon and a knight.")
        await until(lambda: window.metrics.panes[pane.key].gen_tokens >= 3, what="first tokens")
        pane.stop_button.click()
        await until(lambda: not pane.is_busy, what="the stop")
        assert finals[0].reason is FinishReason.CANCELLED
        assert finals[0].stats.gen_tokens < TINY_LONG.max_tokens
        assert pane.chat.messages[-1] == {"role": NOTICE, "content": "stopped"}
        snap = window.client.snapshot
        assert (snap.running, snap.waiting) == (0, 0)

    run_tiny_window(scenario, panes=1)


def test_minimized_window_draws_nothing_and_catches_up_when_restored(run_tiny_window):
    async def scenario(window):
        pane = window.panes[0]
        metrics, rate = window.metrics.panes[pane.key], window.plots.pane_curves[pane.key]["rate"]
        await start_long_reply(window, pane, "Write a long story about a dragon and a knight.", TINY_LONG)
        asked = pane.transcript.toPlainText()
        await until(
            lambda: len(pane.transcript.toPlainText()) > len(asked) and len(rate.getData()[0]), what="a flush and a plot tick"
        )
        window.setWindowState(Qt.WindowState.WindowMinimized)
        text, tokens, rate_x = pane.transcript.toPlainText(), metrics.gen_tokens, rate.getData()[0].copy()
        await until(lambda: metrics.gen_tokens >= tokens + 10, what="tokens while minimized")
        ticks = len(metrics.tok_rate)  # sampled at each tick, minimized or not
        await until(lambda: len(metrics.tok_rate) >= ticks + 2, what="two ticks after them: a flush was due")
        assert pane.is_busy  # the engine kept going
        assert pane.transcript.toPlainText() == text
        assert list(rate.getData()[0]) == list(rate_x)
        window.setWindowState(Qt.WindowState.WindowNoState)
        assert len(pane.transcript.toPlainText()) > len(text)  # at once, not at the next tick
        assert len(rate.getData()[0]) > len(rate_x)
        pane.session.stop()
        await until(lambda: not pane.is_busy, what="the stop")

    run_tiny_window(scenario, panes=1)


def test_broadcast_reaches_every_pane_and_they_stream_together(run_tiny_window):
    async def scenario(window):
        set_params(window, TINY_QUICK)
        window.broadcast_edit.setText("Tell me a fact about the moon.")
        window.broadcast_edit.returnPressed.emit()
        assert all(p.is_busy for p in window.panes)
        await until(lambda: window.workspace.is_idle, what="every reply")
        for pane in window.panes:
            assert [m["role"] for m in pane.chat.messages] == ["user", "assistant", NOTICE]
        assert max(st.n_decode for st in window.client.recent_steps()) == 4  # one step fed all four

    run_tiny_window(scenario, panes=4)


def test_the_readout_shows_the_kv_hit_rate_while_the_first_reply_streams(run_tiny_window):
    async def scenario(window):
        first, second = window.panes
        await start_long_reply(window, first, "Write a long poem about rain.", TINY_LONG)
        await start_long_reply(window, second, "Write a long poem about rain.", TINY_LONG)  # the same prompt: found cached
        await until(lambda: all(re.search(r"KV hit \d+%", p.readout.text()) for p in (first, second)), what="a readout refresh")
        assert first.is_busy and second.is_busy
        assert "KV hit 0%" in first.readout.text()  # nothing to reuse yet, and it says so
        hit = int(second.readout.text().split("KV hit ")[1].split("%")[0])
        assert hit > 80
        window.stop_all()
        await until(lambda: window.workspace.is_idle, what="the stops")

    run_tiny_window(scenario, panes=2)


FAN_OUT_TIP = "One prompt, one setting over several values: a pane each, side by side"
BATCHING_TIP = (
    "One prompt to every pane three times: served one at a time, in static batches, continuously; the timelines side by side"
)
TRACE_TIP = "The recent engine steps and requests as a Chrome trace (Perfetto, chrome://tracing)"


def _entries(window) -> list[tuple]:
    """(where, text, shortcut, tooltip) of every toolbar and menu entry, a separator as "---"."""

    def entry(where, action):
        return (where, "---") if action.isSeparator() else (where, action.text(), action.shortcut().toString(), action.toolTip())

    rows = [entry("toolbar", a) for a in window.findChild(QToolBar, "main-toolbar").actions()]
    return rows + [entry(menu.text(), a) for menu in window.menuBar().actions() for a in menu.menu().actions()]


def test_the_toolbar_and_menus_show_every_entry_as_before(run_tiny_window):
    """The actions table (app/ui/window/actions.py) builds what the hand-written menus showed."""
    quit_key = QKeySequence(QKeySequence.StandardKey.Quit).toString()
    docks = [
        ("Chats", "Ctrl+1"), ("Engine", "Ctrl+2"), ("Live plots", "Ctrl+3"), ("Benchmark", "Ctrl+4"),
        ("Model library", "Ctrl+5"), ("KV cells", "Ctrl+Shift+K"), ("Step timeline", "Ctrl+Shift+T"),
    ]  # fmt: skip
    fan_out = ("Fan out…", "Ctrl+Shift+F", FAN_OUT_TIP)
    batching = ("Show batching", "Ctrl+Shift+B", BATCHING_TIP)
    expected = [
        ("toolbar", "Add pane", "Ctrl+N", "Add pane"),
        ("toolbar", "Remove last pane", "", "Remove last pane"),
        ("toolbar", "---"),
        *[("toolbar", title, key, title) for title, key in docks],
        ("toolbar", *fan_out),
        ("toolbar", *batching),
        ("toolbar", "---"),
        ("toolbar", "", "", ""),  # the Serve API switch
        ("&File", "Add pane", "Ctrl+N", "Add pane"),
        ("&File", "Remove last pane", "", "Remove last pane"),
        ("&File", "---"),
        ("&File", "Save trace…", "", TRACE_TIP),
        ("&File", "---"),
        ("&File", "Quit", quit_key, "Quit"),
        *[("&View", title, key, title) for title, key in docks],
        ("&View", "---"),
        ("&View", "Broadcast field", "Ctrl+L", "Broadcast field"),
        ("&Compare", *fan_out),
        ("&Compare", *batching),
        ("&Compare", "Batching compared", "", "Batching compared"),
        ("&Compare", "Compare", "Ctrl+6", "Compare"),
        ("&Engine", "Stop all replies", "Ctrl+.", "Stop all replies"),
        ("&Engine", "Restart engine", "", "Restart engine"),
        ("&Help", "About", "", "About"),
    ]

    async def scenario(window):
        assert _entries(window) == expected
        assert window.action("dock.chats") is window.chats_dock.toggleViewAction()

    run_tiny_window(scenario, panes=1)


def test_the_menu_bar_and_the_keys_people_expect(run_tiny_window):
    async def scenario(window):
        assert [a.text() for a in window.menuBar().actions()] == ["&File", "&View", "&Compare", "&Engine", "&Help"]
        window.activateWindow()
        QTest.qWaitForWindowActive(window)
        QTest.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        assert len(window.panes) == 2
        QTest.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
        assert window.broadcast_edit.hasFocus()
        pane = window.panes[0]
        await start_long_reply(window, pane, "Write a long poem about rain.", TINY_LONG)
        pane.input.setFocus()
        QTest.keyClick(pane.input, Qt.Key.Key_Escape)
        await until(lambda: not pane.is_busy, what="the stop")
        assert pane.chat.messages[-1] == {"role": NOTICE, "content": "stopped"}
        window.action("help.about").trigger()
        about = window.findChild(QMessageBox)
        assert about.isVisible() and not about.isModal() and Path(window.client.config.model_path).name in about.text()
        about.close()

    run_tiny_window(scenario, panes=1)


def test_the_title_names_the_model_and_a_broadcast_no_pane_can_take_says_so(run_tiny_window):
    async def scenario(window):
        assert window.windowTitle() == f"{Path(window.client.config.model_path).stem} · Batch playground"
        pane = window.panes[0]
        await start_long_reply(window, pane, "Write a long poem about rain.", TINY_LONG)
        QTest.keyClicks(window.broadcast_edit, "Hello, everyone")
        send_all = next(b for b in window.findChildren(QPushButton) if b.text() == "Send to all")
        QTest.mouseClick(send_all, Qt.MouseButton.LeftButton)
        assert "Every pane is busy" in window.statusBar().currentMessage()
        assert window.broadcast_edit.text() == "Hello, everyone"  # kept, to send later
        assert [m["role"] for m in pane.chat.messages] == ["user"]  # the busy pane took nothing
        pane.session.stop()
        await until(lambda: not pane.is_busy, what="the stop")

    run_tiny_window(scenario, panes=1)


def test_plots_get_points_for_each_pane_with_a_legend_units_and_hit_rates_in_percent(run_tiny_window):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=120))  # some ticks long: the batch plot sees them together
        window.workspace.broadcast("Hi!")
        await until(lambda: window.workspace.is_idle, what="every reply")
        ticked = len(window.metrics.engine_rate)
        await until(lambda: len(window.metrics.engine_rate) >= ticked + 2, what="two plot ticks")
        for pane in window.panes:
            curves = window.plots.pane_curves[pane.key]
            for name in ("rate", "itl"):
                x, y = curves[name].getData()
                assert x is not None and len(x) > 0, (pane.chat.name, name)
            for name in ("ttft", "hit"):
                x, y = window.plots.points(pane.key, name)
                assert len(x) > 0, (pane.chat.name, name)
            assert max(curves["rate"].getData()[1]) > 0
        assert len(window.plots.point_sets["hit"].data) == len(window.panes)  # one per reply
        plots = window.plots
        assert all(pane.chat.name in plots.legend.text for pane in window.panes)
        titles = {name: getattr(plots, f"{name}_plot").titleLabel.text for name in ("rate", "hit", "engine", "batch")}
        units = {"rate": "(tok/s)", "hit": "(%)", "engine": "(tok/s)", "batch": "Sequences per step"}  # each title says its unit
        assert all(units[name] in title for name, title in titles.items()), titles
        hits = [y for pane in window.panes for y in plots.points(pane.key, "hit")[1]]
        assert 50 < max(hits) <= 100  # in %, as the readouts say it: the later panes reuse the first's prompt
        assert plots.batch_plot.viewRange()[0][1] > 0  # room right of now: the newest dots are whole
        x, y = window.plots.engine_curves["batch"].getData()
        assert max(y) >= 2
        assert "tok/s" in window.panes[0].readout.text()

    run_tiny_window(scenario, panes=3)


def test_slider_change_reaches_the_engine(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_LONG)
        for name, value in (("temperature", 1.3), ("top_k", 7), ("top_p", 0.5), ("min_p", 0.1), ("repeat_penalty", 1.25)):
            pane.params_editor.sliders[name].setValue(_spec(name).to_int(value))
        type_seed(pane, qtbot, "1234", Qt.Key.Key_Return)
        pane.session.send("Count from one to fifty.")
        await until(lambda: window.metrics.panes[pane.key].gen_tokens >= 1, what="the first token")
        running = await window.client.call(lambda engine: [s.params for s in engine.scheduler.running])
        pane.session.stop()
        await until(lambda: not pane.is_busy)
        assert len(running) == 1
        p = running[0]
        assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed) == (1.3, 7, 0.5, 0.1, 1.25, 1234)

    run_tiny_window(scenario, panes=1)


def open_settings(pane, qtbot) -> None:
    """Open the pane's ⚙ in the window in front, as a person has it: Tab moves focus only there."""
    pane.window().activateWindow()
    qtbot.waitUntil(pane.window().isActiveWindow, timeout=2000)
    if not pane.settings_button.isChecked():
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
    assert pane.params_area.isVisible()


def type_seed(pane, qtbot, text: str, finish: Qt.Key) -> None:
    """Replace the seed field's text as a person does, then press `finish` (Tab or Enter)."""
    open_settings(pane, qtbot)
    field = pane.params_editor.seed_edit
    qtbot.mouseClick(field, Qt.MouseButton.LeftButton)
    qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(field, Qt.Key.Key_Backspace)
    qtbot.keyClicks(field, text)
    qtbot.keyClick(field, finish)


def test_copy_settings_to_all_panes(run_tiny_window, qtbot):
    async def scenario(window):
        first = window.panes[0]
        open_settings(first, qtbot)
        editor = first.params_editor
        qtbot.mouseClick(editor.sliders["max_tokens"], Qt.MouseButton.LeftButton)
        qtbot.keyClick(editor.sliders["max_tokens"], Qt.Key.Key_Home)
        qtbot.mouseClick(editor.system_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClicks(editor.system_edit, "Be brief.")
        type_seed(first, qtbot, "7", Qt.Key.Key_Tab)
        first.params_area.ensureWidgetVisible(editor.copy_button)
        qtbot.mouseClick(editor.copy_button, Qt.MouseButton.LeftButton)
        assert (first.params.max_tokens, first.params.system_prompt, first.params.seed) == (16, "Be brief.", 7)
        for pane in window.panes[1:]:
            assert pane.params == first.params
            assert window.settings.pane_params(pane.key) == first.params  # and saved
            assert pane.params_editor.seed_edit.text() == "7"

    run_tiny_window(scenario, panes=3)


def test_a_cleared_seed_is_random_again(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        for finish in (Qt.Key.Key_Tab, Qt.Key.Key_Return):
            type_seed(pane, qtbot, "42", finish)
            assert pane.params.seed == 42 and window.settings.pane_params(pane.key).seed == 42
            type_seed(pane, qtbot, "", finish)
            assert pane.params_editor.seed_edit.text() == ""  # the field shows "random"
            assert pane.params.seed is None and pane.params.sampling().seed is None  # the request has none
            assert window.settings.pane_params(pane.key).seed is None  # nor what is saved

    run_tiny_window(scenario, panes=1)


def test_closing_a_pane_while_it_generates_leaves_no_work(run_tiny_window):
    async def scenario(window):
        pane = window.panes[1]
        await start_long_reply(window, pane, "Write a long story about a lighthouse.", TINY_LONG)
        await window.close_pane(pane)
        assert pane not in window.panes and pane.key not in window.plots.pane_curves
        snap = lambda: window.client.snapshot  # noqa: E731
        await until(lambda: (snap().running, snap().waiting) == (0, 0), timeout=10, what="the engine to drop it")
        assert len(window.panes) == 1

    run_tiny_window(scenario, panes=2)


def test_closing_the_window_while_generating_cancels_and_closes_the_engine(loop, home, tiny_model_path):
    async def scenario():
        window = await open_window(tiny_model_path, home, panes=3)
        set_params(window, TINY_LONG)
        window.workspace.broadcast("Write a long story about a forest.")
        await until(lambda: all(window.metrics.panes[p.key].gen_tokens for p in window.panes), what="tokens")
        closed = asyncio.Event()
        window.sigClosed.connect(closed.set)
        window.close()
        await asyncio.wait_for(closed.wait(), 30)
        assert not window.client.is_running and not window.isVisible()
        assert all(p.chat.messages[-1]["role"] == NOTICE for p in window.panes)

    loop.run_until_complete(scenario())


def test_prompt_too_long_shows_the_reason_in_the_pane(run_tiny_window):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        pane.session.send("word " * 6000)  # more tokens than the 4096-cell context
        await until(lambda: not pane.is_busy, what="the refusal")
        last = pane.chat.messages[-1]
        assert last["role"] == NOTICE and last["content"].startswith("not answered:")
        assert "user" not in [m["role"] for m in pane.chat.messages]  # the refused turn was taken back
        assert pane.input.toPlainText().startswith("word")
        assert "not answered" in pane.transcript.toPlainText()

    run_tiny_window(scenario, panes=1)


def test_broken_model_file_keeps_the_previous_model(run_tiny_window, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a model")

    async def scenario(window):
        panel = window.engine_panel
        before = window.client.model_info.path
        panel.model_path.setText(str(bad))
        await panel.apply()
        assert panel.last_error and panel.error_box.isVisible()
        assert "Kept the previous model" in panel.status.text()
        assert window.client.model_info.path == before and panel.model_path.text() == before
        set_params(window, TINY_QUICK)
        window.panes[0].session.send("Hello")
        await until(lambda: window.workspace.is_idle)
        assert [m["role"] for m in window.panes[0].chat.messages[-2:]] == ["assistant", NOTICE]
        panel.error_box.close()

    run_tiny_window(scenario, panes=1)


def test_apply_reloads_without_losing_chats(run_tiny_window):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        pane.session.send("Hello")
        await until(lambda: not pane.is_busy)
        await start_long_reply(window, pane, "Write a long poem about rain.", TINY_LONG)
        window.engine_panel.n_batch.setValue(256)
        window.engine_panel.overflow.setCurrentIndex(1)  # drop the oldest turns
        await window.engine_panel.apply()
        assert window.engine_panel.last_error == ""
        await until(lambda: not pane.is_busy, what="the cut-short reply")
        assert window.client.config.n_batch == 256
        assert window.client.config.overflow is OverflowPolicy.TRUNCATE
        assert window.settings.engine_config("x.gguf").overflow is OverflowPolicy.TRUNCATE
        roles = [m["role"] for m in pane.chat.messages]
        assert roles[:4] == ["user", "assistant", NOTICE, "user"] and roles[-1] == NOTICE
        assert "reloaded" in pane.chat.messages[-1]["content"]

    run_tiny_window(scenario, panes=1)


def test_sequential_switch_pauses_the_streams_already_running_at_once(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_LONG)
        window.workspace.broadcast("Tell me a long story about a lighthouse.")
        await until(lambda: all(window.metrics.panes[p.key].gen_tokens >= 2 for p in window.panes), what="four streams")
        window.engine_dock.show()
        qtbot.mouseClick(window.engine_panel.sequential, Qt.MouseButton.LeftButton)
        switched = lambda: window.client.config.mode.value == "sequential" and window.client.snapshot.paused == 3  # noqa: E731
        await until(switched, timeout=10, what="sequential, with three paused streams")
        window.tick()
        window.refresh_readouts()
        status = window.status_label.text()
        window.stop_all()
        await until(lambda: window.workspace.is_idle)
        return status

    status = run_tiny_window(scenario, panes=4)
    assert status.startswith("sequential · running 1 · paused 3")


def test_a_chat_outgrowing_its_stream_is_told_in_the_status_bar_and_the_engine_panel(run_tiny_window, qtbot):
    """Two panes in 4,096 cells: a stream of 2,048 cells each. A pasted text of 2,200 words outgrows
    it; the engine moves every chat to one pool, and the window says so, and why."""

    async def scenario(window):
        toolbar = window.findChild(QToolBar, "main-toolbar")
        qtbot.mouseClick(toolbar.widgetForAction(window.engine_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        facts = window.engine_panel.model_facts
        shown_at_start = shown(facts)
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        pane.input.setPlainText("word " * 2200 + "Summarize.")
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: "KV layout changed" in window.statusBar().currentMessage(), what="the status bar's message")
        message = window.statusBar().currentMessage()
        await until(lambda: "changed 1 time" in shown(facts), what="the engine panel's layout line")
        await until(lambda: window.workspace.is_idle, what="the reply")
        return shown_at_start, message, shown(facts), window.client.snapshot

    shown_at_start, message, facts, snap = run_tiny_window(scenario, panes=2, capacity=2)
    assert (
        "KV layout: a stream per sequence, 2 × 2048 cells (automatic: one pool when a chat outgrows its stream)" in shown_at_start
    )
    assert snap.layout_changes == 1 and snap.layout_change_s > 0
    assert re.fullmatch(r"one pool \(automatic: a chat of 22\d\d tokens outgrew its stream of 2048 cells\)", snap.kv_layout)
    assert message == f"The KV layout changed to {snap.kv_layout}"  # one model: not named
    assert f"KV layout: {snap.kv_layout} · changed 1 time, {snap.layout_change_s:.2f} s" in facts


def shown(label) -> str:
    """A rich-text label's text as read: entities resolved, non-breaking spaces as spaces."""
    return html.unescape(label.text()).replace("\u00a0", " ")
