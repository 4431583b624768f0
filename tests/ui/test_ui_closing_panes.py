"""Adding a pane from the toolbar; closing a pane asks first when it would take a chat or unsent text from view (the chat stays in the Chats
list). On the tiny model; which chat a close keeps is test_workspace's, the question is the window's."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QToolBar
from ui_fixtures import TINY_QUICK, set_params, until

from app.ui.docks.chat_list import ChatRow
from app.workspace.chat_store import Chat

pytestmark = pytest.mark.gui


async def send(qtbot, pane, text: str) -> None:
    qtbot.keyClicks(pane.input, text)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    await until(lambda: not pane.is_busy, what="the reply")


async def answer(qtbot, window, button: QMessageBox.StandardButton) -> None:
    box = window.close_box
    await until(lambda: box.isVisible(), 5, "the question")
    qtbot.mouseClick(box.button(button), Qt.MouseButton.LeftButton)


def test_closing_a_pane_with_a_chat_asks_first_and_keeps_the_chat_listed(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK)
        first, second = window.panes
        await send(qtbot, second, "Hello")

        qtbot.mouseClick(second.close_button, Qt.MouseButton.LeftButton)
        assert "stays in the Chats list" in window.close_box.text()
        await answer(qtbot, window, QMessageBox.StandardButton.No)
        assert window.panes == [first, second]  # No keeps it

        qtbot.mouseClick(second.close_button, Qt.MouseButton.LeftButton)
        await answer(qtbot, window, QMessageBox.StandardButton.Yes)
        await until(lambda: window.panes == [first], 10, "the pane to close")
        row = window.chat_list.row(second.key)
        assert row is not None and not row.is_open and row.turns == 1  # out of view, still listed

        asked = window.close_box
        qtbot.mouseClick(first.close_button, Qt.MouseButton.LeftButton)  # an empty chat: nothing to ask
        await until(lambda: not window.panes, 10, "the empty pane to close")
        assert window.close_box is asked

    run_tiny_window(scenario, panes=2)


def test_remove_last_pane_asks_too(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK)
        last = window.panes[-1]
        await send(qtbot, last, "Hello")
        toolbar = window.findChild(QToolBar, "main-toolbar")
        button = toolbar.widgetForAction(window.action("pane.remove_last"))
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert last in window.panes
        await answer(qtbot, window, QMessageBox.StandardButton.Yes)
        await until(lambda: last not in window.panes, 10, "the pane to close")
        assert len(window.panes) == 1

    run_tiny_window(scenario, panes=2)


def test_a_pane_with_unsent_text_asks_too_and_is_not_given_another_chat(run_tiny_window, home, qtbot):
    async def scenario(window):
        typed, blank = window.panes
        qtbot.keyClicks(typed.input, "half a thought")
        qtbot.mouseClick(typed.close_button, Qt.MouseButton.LeftButton)
        assert "did not send" in window.close_box.text()
        await answer(qtbot, window, QMessageBox.StandardButton.No)
        assert typed in window.panes

        saved = Chat.new("Saved")
        saved.add("user", "question")
        window.store.save(saved)
        window.chat_list.update_row(ChatRow.of(saved, is_open=False))
        toolbar = window.findChild(QToolBar, "main-toolbar")
        qtbot.mouseClick(toolbar.widgetForAction(window.chats_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        tree = window.chat_list.tree
        qtbot.mouseClick(
            tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualItemRect(window.chat_list.item(saved.chat_id)).center()
        )
        qtbot.mouseClick(window.chat_list.open_button, Qt.MouseButton.LeftButton)
        await until(lambda: saved.chat_id in [p.key for p in window.panes], 10, "the chat to open")
        assert typed in window.panes and typed.input.toPlainText() == "half a thought"  # the blank pane took it
        assert blank not in window.panes

    run_tiny_window(scenario, panes=2)


def test_add_pane_adds_a_blank_pane_until_the_capacity_and_then_is_greyed(run_tiny_window, qtbot):
    async def scenario(window):
        toolbar = window.findChild(QToolBar, "main-toolbar")
        button = toolbar.widgetForAction(window.action("pane.add"))
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert [p.chat.name for p in window.panes] == ["Pane 1", "Pane 2"] and window.panes[1].session.is_blank
        assert not button.isEnabled()  # the capacity is 2
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert len(window.panes) == 2

    run_tiny_window(scenario, panes=1, capacity=2)
