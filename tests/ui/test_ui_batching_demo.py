"""Show batching: one prompt to every pane three times (sequential, static, continuous), greedy
replies of set lengths, to fresh chats; then the three step timelines side by side under a verdict
from the measured times; the panes' chats and the serving mode come back, also after a failure."""

from __future__ import annotations

import asyncio
import re

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QApplication, QLabel, QToolBar
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.errors import EngineError
from app.engine.params import ServingMode
from app.engine.stats import StepPart, StepStats
from app.ui.docks.batching_demo import MODES, Run, reply_lengths, show_batching, verdict

SCREEN = (1366, 768)  # the smallest screen the window is tried on


def _toolbar_button(window, action):
    return window.findChild(QToolBar, "main-toolbar").widgetForAction(action)


async def _earlier_chat(window, qtbot) -> list[tuple[str, object, int]]:
    """A reply in the first pane, a draft in the second; the panes' (chat id, settings, messages)."""
    set_params(window, TINY_QUICK.with_(max_tokens=12))
    first = window.panes[0]
    qtbot.keyClicks(first.input, "an earlier chat")
    qtbot.keyClick(first.input, Qt.Key.Key_Return)
    await until(lambda: window.workspace.is_idle and first.chat.messages[-1]["role"] != "user", 30, "the first reply")
    window.workspace.set_draft(window.workspace.sessions[1], "typed, not sent")
    return [(s.key, s.params, len(s.chat.messages)) for s in window.workspace.sessions]


def _steps_mixing_turns(steps) -> int:
    """Steps that decode a pane's follow-up beside another pane's first reply."""
    first: dict[str | None, str] = {}
    for st in steps:
        for part in st.parts:
            first.setdefault(part.conversation_id, part.request_id)
    return sum(1 for st in steps if len({part.request_id == first[part.conversation_id] for part in st.parts}) == 2)


def _fits(label: QLabel) -> bool:
    """The label's whole text fits its widget: word-wrapped within its width and height, or on one line."""
    room = label.contentsRect()
    metrics = label.fontMetrics()
    flags = Qt.TextFlag.TextWordWrap if label.wordWrap() else Qt.TextFlag.TextSingleLine
    needed = metrics.boundingRect(QRect(0, 0, room.width(), 100_000), int(flags), label.text())
    return needed.width() <= room.width() and needed.height() <= room.height()


@pytest.mark.gui
def test_show_batching_runs_the_same_replies_three_ways_and_says_which_finished_sooner(run_tiny_window, qtbot):
    async def scenario(window):
        window.resize(*SCREEN)
        before = await _earlier_chat(window, qtbot)
        messages: list[str] = []
        window.statusBar().messageChanged.connect(messages.append)
        qtbot.mouseClick(_toolbar_button(window, window.action("compare.show_batching")), Qt.MouseButton.LeftButton)
        await until(lambda: window.action("compare.show_batching").isEnabled() and window.batching.runs, 120, "the three runs")
        comparison = window.batching
        runs = comparison.runs

        # the phase running was told, in order
        phases = [m for m in messages if m.startswith("Show batching: ") and "/3" in m]
        assert [p.split(":")[1].split("…")[0].strip() for p in phases] == ["1/3 sequential", "2/3 static", "3/3 continuous"]

        # the same replies in every run: only the scheduling differs
        lengths = reply_lengths(4)
        assert [run.replies for run in runs] == [8, 8, 8]
        assert [run.tokens for run in runs] == [sum(a + b for a, b in lengths)] * 3
        steps = [run.steps for run in runs]
        assert max(st.n_seqs for st in steps[0]) == 1  # one request at a time
        assert max(st.n_seqs for st in steps[1]) == 4 and max(st.n_decode for st in steps[2]) == 4
        # static makes a pane's follow-up wait for the batch's last first reply; continuous takes it at once
        assert _steps_mixing_turns(steps[1]) == 0 < _steps_mixing_turns(steps[2])
        assert [c.text().split(":")[0] for c in comparison.captions] == ["Sequential", "Static", "Continuous"]

        # the verdict names the measured differences
        sequential, static, continuous = runs
        text = comparison.summary.text()
        assert text == verdict(runs) and text.startswith("Continuous finished")
        for other in (sequential, static):
            ahead, name = other.seconds - continuous.seconds, other.label.lower()
            said = re.search(rf"(\d+\.\d+) s (sooner|later) than {name}|about when {name} did \((\d+\.\d+) s apart\)", text)
            assert said, text
            assert abs(float(said.group(1) or said.group(3)) - abs(ahead)) <= 0.051  # the figure, rounded
            assert said.group(2) in (None, "sooner" if ahead > 0 else "later")
        assert any(m == f"Show batching: {text}" for m in messages)

        # the y axis holds the decode columns; a prompt's chunk is cut, its tokens written on it
        for timeline, run in zip(comparison.timelines, runs):
            top = timeline.plot.getViewBox().viewRange()[1][1]
            assert max(st.n_decode for st in run.steps) < top < max(st.n_tokens for st in run.steps)
            cut = {str(st.n_tokens) for st in run.steps if st.n_tokens > top}
            assert timeline.cut_labels and {label.toPlainText() for label in timeline.cut_labels} <= cut
            assert timeline.key_label is None  # one key for the three, under them
            drawn = sum(len(timeline.drawn(key, decode)[0]) for key in timeline.columns.keys for decode in (True, False))
            assert drawn == sum(len(st.parts) for st in run.steps)  # a rectangle per sequence per step
            first = run.steps[0]
            hover = timeline.hover_text((first.t_start + first.t_end) / 2 - run.t_start)
            assert hover.startswith(f"step at {first.t_start - run.t_start:.2f} s\n")  # in the run, not "ago"

        # at 1366 px every label's text fits
        await until(lambda: comparison.isVisible() and comparison.key.isVisible(), 5, "the dock shown")
        for _ in range(3):  # the layouts' requests, and those they post in turn
            QApplication.processEvents()
            await asyncio.sleep(0)
        labels = [comparison.summary, comparison.key, *comparison.captions]
        assert all(_fits(label) for label in labels), [label.text() for label in labels if not _fits(label)]

        # the panes show the user's chats again, with their settings and draft; the demo's chats are gone
        assert [(s.key, s.params, len(s.chat.messages)) for s in window.workspace.sessions] == before
        assert window.panes[1].input.toPlainText() == "typed, not sent"
        assert {chat.chat_id for chat, _open in window.workspace.listed_chats()} == {key for key, _p, _n in before}
        assert window.client.config.mode is ServingMode.BATCHED  # put back

    run_tiny_window(scenario, panes=4)


@pytest.mark.gui
def test_a_run_that_fails_midway_still_puts_the_chats_and_the_mode_back(run_tiny_window, qtbot):
    async def scenario(window):
        before = await _earlier_chat(window, qtbot)
        set_mode = window.client.set_mode

        async def engine_gone_at_static(mode, model=None):
            if mode is ServingMode.STATIC:
                raise EngineError("the engine stopped")
            await set_mode(mode, model)

        window.client.set_mode = engine_gone_at_static
        runs = await show_batching(window.client, window.workspace, window.batching, window.statusBar(), longest=8)
        assert [run.label for run in runs] == ["Sequential"]
        assert window.statusBar().currentMessage() == "Show batching stopped: the engine stopped"
        assert [(s.key, s.params, len(s.chat.messages)) for s in window.workspace.sessions] == before
        assert window.client.config.mode is ServingMode.BATCHED

    run_tiny_window(scenario, panes=2)


def _run(label: str, seconds: float, one_token_s: float, full_step_s: float) -> Run:
    """A run of 4 panes whose decode steps took `one_token_s` alone or `full_step_s` four at a time."""
    parts = tuple(StepPart(f"r{i}", f"c{i}", 1, True) for i in range(4))
    steps = (
        StepStats(1.0, 40, 1, 0, 40, 0.2, 0.2, 8, (StepPart("r0", "c0", 40, False),)),
        StepStats(2.0, 1, 1, 1, 0, one_token_s, one_token_s, 8, parts[:1]),
        StepStats(3.0, 4, 4, 4, 0, full_step_s, full_step_s, 8, parts),
    )
    return Run(label, "", steps, 0.0, seconds, 8, 240, {})


def _runs(sequential_s: float, static_s: float, continuous_s: float, one_token_s: float, full_step_s: float) -> list[Run]:
    times = (sequential_s, static_s, continuous_s)
    return [_run(label, s, one_token_s, full_step_s) for (_mode, label, _how), s in zip(MODES, times)]


@pytest.mark.unit
def test_the_verdict_says_how_much_sooner_continuous_finished():
    text = verdict(_runs(5.2, 3.1, 2.2, one_token_s=0.011, full_step_s=0.013))
    assert text == "Continuous finished 3.0 s sooner than sequential, 0.9 s sooner than static."


@pytest.mark.unit
def test_a_machine_that_gives_batching_little_is_told_why_from_its_step_times():
    text = verdict(_runs(2.6, 2.0, 2.4, one_token_s=0.011, full_step_s=0.034))
    assert text.startswith("Continuous finished 0.2 s sooner than sequential, 0.4 s later than static.")
    assert "a step of 4 tokens took 34 ms, of 1 token 11 ms" in text and "77% of one alone" in text
    assert "GPU" in text


@pytest.mark.unit
def test_runs_that_finish_together_are_said_to_and_a_small_gain_without_compute_cost_is_not_blamed_on_it():
    text = verdict(_runs(1.25, 1.21, 1.2, one_token_s=0.011, full_step_s=0.015))
    assert "about when sequential did (0.05 s apart), about when static did (0.01 s apart)." in text
    assert "Batching gained little in this run, though a step of 4 tokens took 15 ms" in text and "GPU" not in text


@pytest.mark.unit
def test_reply_lengths_are_staggered_and_every_pane_writes_as_much():
    assert reply_lengths(4, 48) == [(12, 48), (24, 36), (36, 24), (48, 12)]
    assert len({a + b for a, b in reply_lengths(8, 48)}) == 1
