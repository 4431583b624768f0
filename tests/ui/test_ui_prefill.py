"""A pane's "Start the reply with…": the reply begins with the text given and the model goes on from
it (a prefill, sent as a last assistant message); the transcript shows the start and the rest, the
chat keeps them as one reply; the start stays for Regenerate and the next replies until cleared."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from ui_fixtures import QUICK, set_params, until

pytestmark = pytest.mark.gui

START = "The capital of France is"


def test_a_reply_starts_with_the_text_given_and_the_model_goes_on(run_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, QUICK.with_(max_tokens=12))
        qtbot.keyClicks(pane.reply_start, START)
        qtbot.keyClicks(pane.input, "What is the capital of France?")
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: START in pane.transcript.toPlainText(), what="the start shown")
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) == 2, what="the reply")
        first = pane.chat.messages[1]["content"]
        shown = pane.transcript.toPlainText()
        qtbot.mouseClick(pane.regenerate_button, Qt.MouseButton.LeftButton)
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) == 2, what="the reply again")
        again = pane.chat.messages[1]["content"]
        pane.reply_start.clear()  # as its clear button does
        qtbot.keyClicks(pane.input, "And of Italy?")
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) == 4, what="the next reply")
        return first, shown, again, pane.chat.messages

    first, shown, again, messages = run_window(scenario)
    assert first.startswith(START) and len(first) > len(START)  # one assistant message: the start and the rest
    assert START in shown and first[len(START) :].split()[0] in shown  # the start, then what the model wrote
    assert again == first  # greedy: Regenerate starts from the same text and goes the same way
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert not messages[3]["content"].startswith(START)  # cleared: the model starts the reply itself
