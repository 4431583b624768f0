"""The token inspector on the real window: a reply tinted by probability, rivals on hover, a branch on click."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QToolTip
from ui_fixtures import QUICK, set_params, until

from app.ui.pane.token_view import token_at

pytestmark = pytest.mark.gui


def token_spots(transcript) -> dict[tuple[int, int], QPoint]:
    """Where each token of at least three characters is shown, in the viewport."""
    spots, block = {}, transcript.document().begin()
    while block.isValid():
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            where = token_at(fragment.charFormat().anchorHref())
            if where is not None and fragment.length() >= 3:
                cursor = QTextCursor(transcript.document())
                cursor.setPosition(fragment.position() + 1)
                spots[where] = transcript.cursorRect(cursor).center()
            fragments += 1
        block = block.next()
    return spots


def test_probabilities_tint_the_reply_show_rivals_and_a_rival_branches_into_a_new_pane(run_window, qtbot):
    async def scenario(window):
        set_params(window, QUICK.with_(max_tokens=40))
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        box = pane.params_editor.show_probs
        qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))
        assert pane.params.show_probs and pane.params.sampling().n_probs == 5
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)  # the settings fold away
        finals = []
        pane.sigReplyFinished.connect(finals.append)
        qtbot.keyClicks(pane.input, "Describe the sea at dawn.")
        qtbot.keyClick(pane.input, Qt.Key.Key_Return)
        await until(lambda: not pane.is_busy, what="the reply")
        reply = pane.chat.messages[1]["content"]
        assert pane.transcript.toPlainText().count(reply.split("\n")[0]) == 1  # the reply's text, once
        spots = token_spots(pane.transcript)
        assert len(spots) >= 5 and {turn for turn, _ in spots} == {1}

        (turn, index), spot = sorted(spots.items())[3]
        QTest.mouseMove(pane.transcript.viewport(), spot)
        await until(QToolTip.isVisible, 5, "the rivals' tooltip")
        assert "after samplers" in QToolTip.text() and "▶" in QToolTip.text()

        qtbot.mouseClick(pane.transcript.viewport(), Qt.MouseButton.LeftButton, pos=spot)
        await until(lambda: pane.branch_menu is not None and pane.branch_menu.isVisible(), 5, "the rivals' menu")
        menu = pane.branch_menu
        first = menu.actions()[0]
        assert first.text().startswith("Branch from")
        qtbot.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(first).center())
        await until(lambda: len(window.panes) == 2 and window.panes[1].chat.name == "Pane 1 ⑂", 5, "the branch's pane")
        branch = window.panes[1]  # it took the blank second pane's place
        branch_finals = []
        branch.sigReplyFinished.connect(branch_finals.append)
        await until(lambda: branch_finals, what="the branch's reply")
        taken = pane.session.reply_probs[index].top[
            0 if pane.session.reply_probs[index].top[0].token != pane.session.reply_probs[index].chosen.token else 1
        ]
        prefix = b"".join(p.chosen.piece for p in pane.session.reply_probs[:index]).decode() + taken.text
        branched = branch.chat.messages[1]["content"]
        assert branch.chat.messages[0] == pane.chat.messages[0] and branched.startswith(prefix)
        assert branch.params == pane.params
        stats, first_stats = branch_finals[0].stats, finals[0].stats
        # the reply's cells up to the rival were shared: only the rival token was read
        assert (stats.cached_tokens, stats.evaluated_tokens) == (first_stats.prompt_tokens + index, 1)

        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))  # off again: Markdown
        assert not token_spots(pane.transcript) and reply.split("\n")[0].strip("#* ") in pane.transcript.toPlainText()

    run_window(scenario, panes=2)
