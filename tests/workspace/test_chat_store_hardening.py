"""Chat files no reader expects: one nested too deeply for Python's JSON reader is kept aside like any
unreadable file, and a chat holding lone surrogates is saved with U+FFFD in their place, saying so."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from ui_fixtures import QUICK, set_params, until

from app.ui.settings import AppSettings, open_qsettings
from app.workspace.chat_store import CORRUPT, NOTICE, Chat, ChatStore, PendingSaves

DEPTH = 100_000  # far past Python's recursion limit
NESTED_FILE = "[" * DEPTH + "]" * DEPTH
NESTED_CONTENT = '{"chat_id": "deep", "messages": [{"role": "user", "content": ' + NESTED_FILE + "}]}"


@pytest.mark.unit
@pytest.mark.parametrize("text", [NESTED_FILE, NESTED_CONTENT], ids=["file", "content"])
def test_a_deeply_nested_chat_file_is_listed_as_unreadable_and_kept_aside(tmp_path, text):
    store = ChatStore(tmp_path)
    store.folder.mkdir(parents=True)
    store.path("deep").write_text(text)
    store.save(Chat("fine", "Fine"))
    chats, unreadable = store.chats()
    assert [c.chat_id for c in chats] == ["fine"]
    [error] = unreadable
    assert error.reason == "nested too deeply"
    assert CORRUPT in error.kept_as.name and error.kept_as.read_text() == text  # as it was
    assert not store.path("deep").exists()


@pytest.mark.gui
def test_the_window_opens_over_deeply_nested_chat_files_and_says_so(run_window, home):
    store = ChatStore(home)
    store.folder.mkdir(parents=True)
    store.path("deep").write_text(NESTED_CONTENT)  # a pane's chat
    store.path("nest").write_text(NESTED_FILE)  # a listed chat
    settings = AppSettings(open_qsettings())
    settings.pane_ids = ["deep"]
    settings.sync()

    async def scenario(window):
        pane = window.panes[0]
        notice = pane.chat.messages[0]
        assert notice["role"] == NOTICE and "nested too deeply" in notice["content"]
        assert "could not be read" in pane.transcript.toPlainText()
        kept = sorted(p.name for p in store.folder.iterdir() if CORRUPT in p.name)
        assert [name.split(CORRUPT)[0] for name in kept] == ["deep", "nest"]
        said = window.statusBar().currentMessage()
        assert "1 chat file(s) could not be read" in said and kept[1] in said
        assert kept[1] in window.chat_list.status.text()

    run_window(scenario, panes=1)


@pytest.mark.unit
def test_lone_surrogates_are_saved_as_replacement_characters_and_later_saves_go_on(tmp_path):
    store = ChatStore(tmp_path)
    saves = PendingSaves(store)
    broken = Chat("broken", "Broken \ud800")
    broken.add("user", "pasted \udfff text")
    broken.add("assistant", "a split pair \ud83d\ude00 joins")
    saves.save(broken)
    assert saves.repaired == [broken] and saves.failure is None and not saves.is_waiting
    saved = json.loads(store.path("broken").read_bytes().decode("utf-8"))  # valid UTF-8 JSON
    assert saved["name"] == "Broken \ufffd"
    assert [m["content"] for m in saved["messages"]] == ["pasted \ufffd text", "a split pair \U0001f600 joins"]

    fine = Chat("fine", "Fine")
    fine.add("user", "Hello")
    saves.save(fine)
    assert saves.repaired == [] and not saves.is_waiting
    assert store.load("fine").messages == fine.messages


@pytest.mark.gui
def test_the_window_says_a_chat_text_was_repaired_and_saving_goes_on(run_window, home, qtbot):
    """A chat file written by another tool may hold a lone surrogate as a JSON escape (ASCII, valid)."""
    store = ChatStore(home)
    store.folder.mkdir(parents=True)
    chat = Chat("imported", "Imported")
    chat.add("user", "What is \ud800?")
    chat.add("assistant", "A lone surrogate.")
    store.path("imported").write_text(json.dumps(chat.to_json()))
    settings = AppSettings(open_qsettings())
    settings.pane_ids = ["imported", "other"]
    settings.sync()

    async def scenario(window):
        broken, other = window.panes
        set_params(window, QUICK)
        qtbot.keyClicks(broken.input, "And now?")
        qtbot.mouseClick(broken.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: "Imported" in window.statusBar().currentMessage(), timeout=10, what="the repair notice")
        assert "was repaired" in window.statusBar().currentMessage()
        saved = json.loads(store.path("imported").read_bytes().decode("utf-8"))
        assert saved["messages"][0]["content"] == "What is \ufffd?"
        await until(lambda: not broken.is_busy, what="the first pane's turn")

        qtbot.keyClicks(other.input, "Hello")
        qtbot.mouseClick(other.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: not other.is_busy, what="the reply")
        assert other.chat.messages[1]["role"] == "assistant"
        assert store.load(other.key).messages == other.chat.messages  # later saves still land
        assert window.save_warning.isHidden()

    run_window(scenario, panes=2)
