"""No chat is lost: the chat list (open, rename, delete, closing a pane), unreadable chat files, saves
that fail, exports that fail; driven through the window's own buttons, on the tiny model (the rules
themselves are test_workspace's; here, what the window shows of them)."""

from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QMessageBox, QPushButton, QToolBar
from ui_fixtures import TINY_QUICK, set_params, until

from app.ui.docks.chat_list import when
from app.ui.settings import AppSettings, open_qsettings
from app.ui.window.main_window import SAVE_RETRY_TICKS
from app.workspace.chat_store import CORRUPT, NOTICE, Chat, ChatStore

pytestmark = pytest.mark.gui


def saved_chats(home, names: list[str], shown: list[str]) -> list[Chat]:
    """Chats with one exchange each, saved; `shown` are the window's panes, in order."""
    store = ChatStore(home)
    chats = []
    for i, name in enumerate(names):
        chat = Chat(f"chat{i}", name, updated=1_700_000_000 + i, model="SmolLM2.gguf")
        chat.messages += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
        store.save(chat)
        chats.append(chat)
    settings = AppSettings(open_qsettings())
    settings.pane_ids = [c.chat_id for c in chats if c.name in shown]
    settings.sync()
    return chats


def show_chat_list(window, qtbot) -> None:
    toolbar = window.findChild(QToolBar, "main-toolbar")
    qtbot.mouseClick(toolbar.widgetForAction(window.chats_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
    assert window.chat_list.isVisible()


def click_chat(window, qtbot, chat_id: str, button: QPushButton | None = None) -> None:
    """Select the chat's row with the mouse, then click `button` (one of the list's)."""
    tree = window.chat_list.tree
    rect = tree.visualItemRect(window.chat_list.item(chat_id))
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.chat_list.selected_id == chat_id
    if button is not None:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_an_unreadable_chat_file_is_kept_aside_and_the_pane_says_so(run_tiny_window, home):
    store = ChatStore(home)
    store.folder.mkdir(parents=True)
    store.path("lost").write_text('{"chat_id": "lost", "messages": [{"role": "us')  # cut mid-write
    settings = AppSettings(open_qsettings())
    settings.pane_ids = ["lost"]
    settings.set_pane_params("lost", TINY_QUICK.with_(system_prompt="Be brief."))
    settings.sync()

    async def scenario(window):
        pane = window.panes[0]
        kept = [p for p in store.folder.iterdir() if CORRUPT in p.name]
        assert len(kept) == 1 and kept[0].read_text().endswith('"us')  # as it was, byte for byte
        assert pane.key != "lost" and not store.path("lost").exists()  # a new id: the bad file is never overwritten
        assert window.settings.pane_ids == [pane.key]
        assert pane.params.system_prompt == "Be brief."  # the pane's sliders came along
        notice = pane.chat.messages[0]
        assert notice["role"] == NOTICE and kept[0].name in notice["content"]
        assert "could not be read" in pane.transcript.toPlainText()
        assert store.load(pane.key).messages == pane.chat.messages

    run_tiny_window(scenario, panes=1)


def test_a_hidden_chat_reopens_from_the_list_and_closing_a_pane_keeps_its_chat(run_tiny_window, home, qtbot):
    first, second, third = saved_chats(home, ["Moon facts", "Recipes", "Old story"], shown=["Moon facts", "Recipes"])

    async def scenario(window):  # started with one pane of the two saved: "Recipes" is hidden
        chat_list = window.chat_list
        assert [p.key for p in window.panes] == [first.chat_id]
        show_chat_list(window, qtbot)
        assert chat_list.tree.topLevelItemCount() == 3
        row = chat_list.item(second.chat_id)
        assert [row.text(i) for i in range(4)] == ["Recipes", when(second.updated), "1", "SmolLM2"]
        assert chat_list.item(first.chat_id).font(0).bold() and not row.font(0).bold()  # bold: shown in a pane

        click_chat(window, qtbot, second.chat_id, chat_list.open_button)  # the only pane has a chat: a new pane
        await until(lambda: len(window.panes) == 2, what="the new pane")
        reopened = window.panes[1]
        assert reopened.chat.messages == second.messages and "answer 1" in reopened.transcript.toPlainText()
        assert chat_list.item(second.chat_id).font(0).bold()

        qtbot.mouseClick(reopened.close_button, Qt.MouseButton.LeftButton)
        await until(lambda: window.close_box.isVisible(), what="the question: it shows a chat")
        qtbot.mouseClick(window.close_box.button(QMessageBox.StandardButton.Yes), Qt.MouseButton.LeftButton)
        await until(lambda: len(window.panes) == 1, what="the pane to close")
        assert ChatStore(home).load(second.chat_id).messages == second.messages  # closing never deletes a chat
        assert not chat_list.item(second.chat_id).font(0).bold()

        click_chat(window, qtbot, first.chat_id, chat_list.open_button)
        await until(lambda: "already open" in chat_list.status.text())

    run_tiny_window(scenario, panes=1)


def test_a_chat_opens_in_a_free_pane_or_says_there_is_no_room(run_tiny_window, home, qtbot):
    first, second, third = saved_chats(home, ["Moon facts", "Recipes", "Old story"], shown=["Moon facts", "Recipes"])

    async def scenario(window):  # capacity 2: both panes hold a chat
        chat_list = window.chat_list
        show_chat_list(window, qtbot)
        click_chat(window, qtbot, third.chat_id, chat_list.open_button)
        await until(lambda: "No free pane" in chat_list.status.text())
        assert len(window.panes) == 2

        cleared = window.panes[0]
        qtbot.mouseClick(cleared.clear_button, Qt.MouseButton.LeftButton)  # an empty, idle pane is free
        await until(lambda: not cleared.chat.messages)
        click_chat(window, qtbot, third.chat_id, chat_list.open_button)
        await until(lambda: window.panes[0].key == third.chat_id, what="the chat in the free pane")
        assert [p.key for p in window.panes] == [third.chat_id, second.chat_id]
        assert chat_list.item(first.chat_id) is None  # emptied by Clear: nothing left to reopen

    run_tiny_window(scenario, panes=None, capacity=2)


def test_rename_and_delete_from_the_list(run_tiny_window, home, qtbot, monkeypatch):
    first, second = saved_chats(home, ["Moon facts", "Recipes"], shown=["Moon facts"])
    answers = []
    monkeypatch.setattr(QMessageBox, "question", lambda *args: answers.pop(0))
    monkeypatch.setattr("app.ui.docks.chat_list.QInputDialog.getText", lambda *args, **kwargs: ("Soups", True))

    async def scenario(window):
        chat_list, store = window.chat_list, ChatStore(home)
        show_chat_list(window, qtbot)
        click_chat(window, qtbot, second.chat_id, chat_list.rename_button)
        assert chat_list.item(second.chat_id).text(0) == "Soups" and store.load(second.chat_id).name == "Soups"
        click_chat(window, qtbot, first.chat_id, chat_list.rename_button)  # an open chat: its pane shows the name
        assert "Soups" in window.panes[0].name_label.text() and store.load(first.chat_id).name == "Soups"

        answers.append(QMessageBox.StandardButton.No)
        click_chat(window, qtbot, second.chat_id, chat_list.delete_button)
        assert store.load(second.chat_id) is not None and chat_list.item(second.chat_id) is not None
        answers.append(QMessageBox.StandardButton.Yes)
        click_chat(window, qtbot, second.chat_id, chat_list.delete_button)
        await until(lambda: chat_list.item(second.chat_id) is None, what="the row to go")
        assert store.load(second.chat_id) is None and "Deleted" in chat_list.status.text()

        answers.append(QMessageBox.StandardButton.Yes)  # the open one: its pane gets a new, empty chat
        click_chat(window, qtbot, first.chat_id, chat_list.delete_button)
        await until(lambda: window.panes[0].key != first.chat_id, what="a new chat in the pane")
        assert store.load(first.chat_id) is None and window.panes[0].chat.messages == []
        assert not answers

    run_tiny_window(scenario, panes=1)


class ShowCounter(QObject):
    def __init__(self, widget):
        super().__init__()
        self.shown = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        self.shown += event.type() == QEvent.Type.Show
        return False


def test_a_save_that_fails_is_shown_once_and_clears_when_saving_works_again(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK)
        folder = window.store.folder
        shutil.rmtree(folder)
        folder.write_text("")  # a file where the folder was: no save can succeed, not even as root
        counter = ShowCounter(window.save_warning)
        qtbot.keyClicks(pane.input, "Hello")
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: not pane.is_busy, what="the reply")
        assert [m["role"] for m in pane.chat.messages[-2:]] == [
            "assistant",
            NOTICE,
        ]  # the chat goes on in memory (cut at Max tokens)
        assert window.save_warning.isVisible() and "Chats cannot be saved" in window.save_warning.text()
        assert counter.shown == 1  # the user turn and the reply both failed to save: told once
        folder.unlink()
        for _ in range(SAVE_RETRY_TICKS):  # the window's clock, run on: a retry is due within these ticks
            window.tick()
        await until(lambda: window.save_warning.isHidden(), timeout=5, what="the retry")
        assert ChatStore(window.store.folder.parent).load(pane.key).messages == pane.chat.messages

    run_tiny_window(scenario, panes=1)


def test_an_export_that_fails_shows_a_warning(run_tiny_window, home, qtbot, monkeypatch):
    target = home / "no-such-folder" / "chat.md"
    monkeypatch.setattr("app.ui.dialogs.QFileDialog.getSaveFileName", lambda *args: (str(target), ""))

    async def scenario(window):
        pane = window.panes[0]
        qtbot.mouseClick(pane.export_button, Qt.MouseButton.LeftButton)
        box = pane.findChild(QMessageBox)
        assert box is not None and box.isVisible()
        assert str(target) in box.text() and "No such file" in box.text()
        box.close()

    run_tiny_window(scenario, panes=1)


def test_an_export_gets_the_chosen_formats_extension_and_says_where(run_tiny_window, home, qtbot, monkeypatch):
    chosen = []  # what the user picks in the dialog: a name without an extension, and a filter
    monkeypatch.setattr("app.ui.dialogs.QFileDialog.getSaveFileName", lambda *args: chosen.pop())
    saved_chats(home, ["Lunch", "Supper"], shown=["Lunch"])

    async def scenario(window):
        pane = window.panes[0]
        chosen.append((str(home / "lunch"), "Markdown (*.md)"))
        qtbot.mouseClick(pane.export_button, Qt.MouseButton.LeftButton)
        assert not (home / "lunch").exists()
        assert (home / "lunch.md").read_text(encoding="utf-8").startswith("# Lunch\n\n**You:**\n\nquestion 0")
        assert window.statusBar().currentMessage() == "Exported to lunch.md"
        show_chat_list(window, qtbot)
        chosen.append((str(home / "supper"), "JSON (*.json)"))
        click_chat(window, qtbot, "chat1", window.chat_list.export_button)
        assert json.loads((home / "supper.json").read_text(encoding="utf-8"))["name"] == "Supper"
        assert window.statusBar().currentMessage() == "Exported to supper.json"

    run_tiny_window(scenario, panes=None)
