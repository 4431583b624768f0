"""A pane's pictures without a window: attached, sent with the next message and re-sent with the
history, given back when the turn is refused, saved with the chat in its one file (base64 with
their SHA-256) and read back; a broken entry in an edited file leaves the rest of the chat whole."""

from __future__ import annotations

import json

import pytest
from pictures import png
from test_workspace import make, run, settle

from app.engine.events import FinishReason
from app.engine.images import IMAGE_MARKER, Image
from app.workspace.chat_store import NOTICE, Chat, ChatStore, to_markdown

pytestmark = pytest.mark.unit

RED, BLUE = Image.of(png(seed=1)), Image.of(png(seed=2))


def test_attached_pictures_go_with_the_next_message_and_again_with_the_history(tmp_path):
    ws, source, *_ = make(tmp_path)
    ws.restore(pane_count=1)
    session = ws.sessions[0]
    seen = []
    session.attachments_changed.connect(seen.append)
    session.attach(RED)
    session.attach(RED)  # the same picture once
    session.attach(BLUE)
    session.detach(0)
    assert session.attached == [BLUE] and seen[-1] == [BLUE] and not session.is_blank

    async def chat():
        session.send("What is this?")
        await settle(ws)
        session.send("And now?")
        await settle(ws)

    run(chat())
    assert session.attached == [] and seen[-1] == []
    first, second = source.requests
    shown = first.messages[-1]
    assert shown["images"] == (BLUE,) and shown["content"] == IMAGE_MARKER + "What is this?"
    assert second.messages[0]["images"] == (BLUE,) and "images" not in second.messages[-1]  # re-sent with the history


def test_a_picture_alone_is_a_message(tmp_path):
    ws, source, *_ = make(tmp_path)
    ws.restore(pane_count=1)
    session = ws.sessions[0]
    session.attach(RED)

    async def chat():
        assert session.send("")
        await settle(ws)

    run(chat())
    assert source.requests[0].messages[-1] == {"role": "user", "content": IMAGE_MARKER, "images": (RED,)}


def test_a_refused_turn_gives_back_its_text_and_its_pictures(tmp_path):
    ws, _source, *_ = make(tmp_path, script=lambda r: ([], FinishReason.ERROR, "this model does not see images"))
    ws.restore(pane_count=1)
    session = ws.sessions[0]
    session.attach(RED)

    async def chat():
        session.send("Look")
        await settle(ws)

    run(chat())
    assert session.attached == [RED] and session.draft == "Look"
    assert session.chat.messages[-1]["role"] == NOTICE and "does not see images" in session.chat.messages[-1]["content"]


def test_a_completion_pane_does_not_send_pictures(tmp_path):
    ws, source, *_ = make(tmp_path)
    ws.restore(pane_count=1)
    session = ws.sessions[0]
    session.set_params(session.params.with_(completion=True))
    refusals = []
    session.send_refused.connect(refusals.append)
    session.attach(RED)
    assert not session.send("Once upon a time") and "completion mode" in refusals[0] and not source.requests


def test_pictures_are_saved_in_the_chat_file_and_read_back(tmp_path):
    chat = Chat.new("with pictures")
    chat.add("user", "two of them", images=(RED, BLUE))
    chat.add("assistant", "I see.")
    store = ChatStore(tmp_path)
    store.save(chat)
    saved = json.loads(store.path(chat.chat_id).read_text(encoding="utf-8"))  # one plain JSON file
    assert [p["sha256"] for p in saved["messages"][0]["images"]] == [RED.digest, BLUE.digest]
    again = store.load(chat.chat_id)
    assert again.messages == chat.messages and again.messages[0]["images"] == (RED, BLUE)
    assert "![picture](data:image/png;base64," in to_markdown(again)


def test_a_broken_picture_in_an_edited_file_leaves_the_chat_readable(tmp_path):
    chat = Chat.new("edited")
    chat.add("user", "see", images=(RED,))
    store = ChatStore(tmp_path)
    store.save(chat)
    saved = json.loads(store.path(chat.chat_id).read_text(encoding="utf-8"))
    saved["messages"][0]["images"].append({"sha256": "x", "data": "not base64 !"})
    saved["messages"][0]["images"].append("nonsense")
    store.path(chat.chat_id).write_text(json.dumps(saved), encoding="utf-8")
    again = store.load(chat.chat_id)
    assert again.messages[0]["images"] == (RED,) and again.messages[0]["content"] == "see"
