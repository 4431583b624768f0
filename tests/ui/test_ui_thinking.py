"""A thinking model's reply in a pane: its thoughts stream live under an open "Thinking…" fold, fold
away with their time and tokens when the answer starts, and open and fold again by a click on the
fold; ⚙ Think and the thinking budget; the readout counts thoughts and answer apart."""

from __future__ import annotations

import math
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from test_ui_transcript import link_spots, shown_transcript
from ui_fixtures import QUICK, set_params, until, window_runner

from app.ui.pane.transcript import THINKING, Transcript

pytestmark = pytest.mark.gui

THOUGHTS = "The user asks a sum.\nTwo and two make four."
CHAT = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "2 + 2 = **4**.", "reasoning": THOUGHTS, "reasoning_s": 3.21, "reasoning_tokens": 45},
]


def click_fold(qtbot, transcript: Transcript, nth: int = 0) -> None:
    qtbot.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=link_spots(transcript, "fold:")[nth])
    QApplication.processEvents()


def test_a_replys_thoughts_fold_and_open_by_a_click(qtbot):
    transcript = shown_transcript(qtbot, CHAT)
    text = transcript.toPlainText()
    assert "▸ Thought for 3.2 s · 45 tokens" in text and "Two and two" not in text and "2 + 2 = 4." in text
    click_fold(qtbot, transcript)
    text = transcript.toPlainText()
    assert "▾ Thought for 3.2 s · 45 tokens\nThe user asks a sum.\nTwo and two make four.\n2 + 2 = 4." in text
    click_fold(qtbot, transcript)
    assert "Two and two" not in transcript.toPlainText()


def test_thoughts_stream_open_then_fold_when_the_answer_starts(qtbot):
    transcript = shown_transcript(qtbot, CHAT[:1])
    transcript.begin_reply(CHAT[:1])
    for piece in ["The user", " asks a sum.", "\nTwo and two", " make four."]:
        transcript.append_thoughts(piece)
    assert transcript.is_thinking
    assert f"▾ {THINKING}\nThe user asks a sum.\nTwo and two make four." in transcript.toPlainText()
    transcript.end_thoughts(3.21, 45)
    for piece in ["2 + 2", " = **4**", ".\n\nDone."]:
        transcript.append_reply(piece)
    text = transcript.toPlainText()
    assert not transcript.is_thinking and "▸ Thought for 3.2 s · 45 tokens\n2 + 2 = 4." in text and "asks" not in text
    click_fold(qtbot, transcript)  # opened while the answer streams: the answer goes on below them
    transcript.append_reply(" More.")
    assert "▾ Thought for 3.2 s · 45 tokens\nThe user asks a sum.\nTwo and two make four.\n2 + 2 = 4.\nDone. More." in (
        transcript.toPlainText()
    )
    transcript.show_messages([*CHAT[:1], {**CHAT[1], "content": "2 + 2 = **4**.\n\nDone. More."}])
    assert "Two and two make four.\n2 + 2 = 4.\nDone. More." in transcript.toPlainText()  # still open when it ends


@pytest.fixture
def run_thinking_window(loop, home, thinking_models):
    """A window on the bundled model carrying DeepSeek R1's way of thinking (its prompt opens the thoughts)."""
    return window_runner(loop, home, thinking_models["r1"])


def test_a_pane_shows_a_thinking_models_thoughts_folded_and_counts_them_apart(run_thinking_window, qtbot, tmp_path):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, QUICK.with_(max_tokens=40, reasoning_budget=3))
        pane.session.send("What is 2+2?")
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) == 2, what="the reply")
        reply = pane.chat.messages[1]
        pane.refresh_readout()
        readout = pane.readout.text()
        window.grab().save(str(tmp_path / "thinking-pane.png"))
        window.plots.refresh(time.monotonic())
        answer_points = window.plots.points(pane.key, "answer")[1].tolist()
        answer_s = pane.session.metrics.panes[pane.key].answer_s
        folded = pane.transcript.toPlainText()
        click_fold(qtbot, pane.transcript)
        opened = pane.transcript.toPlainText()
        # ⚙ Think off: the prompt's thoughts are closed at once, and the model answers
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        pane.params_editor.think.click()
        pane.session.send("And 3+3?")
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) == 4, what="the second reply")
        shown = (answer_points, answer_s)
        return reply, readout, folded, opened, pane.chat.messages[3], pane.params_editor.budget_spin.isEnabled(), shown

    reply, readout, folded, opened, unthought, budget_enabled, shown = run_thinking_window(scenario, panes=1)
    assert reply["reasoning"] and reply["content"].strip() and reply["reasoning_tokens"] == 3 + 5
    assert f"▸ Thought for {reply['reasoning_s']:.1f} s · 8 tokens" in folded and reply["reasoning"] not in folded
    assert reply["reasoning"] in opened
    assert "think 8 / answer" in readout and "answer at" in readout
    # the latency plot's ▲: the first answer token, on its log axis, one point for the one reply that thought
    (answer_y,), answer_s = shown
    assert answer_y == pytest.approx(math.log10(answer_s))
    assert "reasoning" not in unthought and unthought["content"].strip() and not budget_enabled
