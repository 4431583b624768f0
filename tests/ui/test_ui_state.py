"""The window's plain-data parts, no engine: chats and their files, replies' Markdown, ring buffers, settings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QFontInfo, QGuiApplication

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import EngineConfig, OverflowPolicy, ServingMode
from app.engine.stats import RequestStats
from app.ui.dialogs import with_filter_suffix
from app.ui.pane.markdown_render import markdown_document
from app.ui.settings import AppSettings
from app.ui.theme import Theme
from app.workspace.chat_store import (
    CORRUPT,
    CUT_BY_EXIT,
    NOTICE,
    Chat,
    ChatStore,
    PendingSaves,
    UnreadableChat,
    export_chat,
    to_markdown,
)
from app.workspace.metrics import MetricsStore, Ring
from app.workspace.pane_params import PaneParams


@pytest.mark.unit
def test_chat_for_model_puts_the_system_prompt_first_and_skips_notices():
    chat = Chat.new("Pane 1")
    chat.add("user", "hi")
    chat.add("assistant", "hello")
    chat.add(NOTICE, "stopped")
    assert chat.for_model("Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert chat.for_model("  ")[0]["role"] == "user"


@pytest.mark.unit
def test_drop_last_reply_keeps_the_last_user_turn():
    chat = Chat.new("x")
    for role, text in (("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"), (NOTICE, "n")):
        chat.add(role, text)
    assert chat.drop_last_reply() == "c"
    assert [m["content"] for m in chat.messages] == ["a", "b", "c"]


@pytest.mark.unit
def test_chat_store_round_trip(tmp_path):
    store = ChatStore(tmp_path)
    chat = Chat.new("Pane 2")
    chat.add("user", "héllo")
    chat.add_cut_reply("half a", "cut short: boom")
    chat.model = "model.gguf"
    store.save(chat)
    assert store.load(chat.chat_id) == chat
    assert store.load("missing") is None
    assert [p.name for p in store.folder.iterdir()] == [f"{chat.chat_id}.json"]  # no temp file left


@pytest.mark.unit
def test_unreadable_chat_files_are_kept_aside_never_overwritten(tmp_path):
    store = ChatStore(tmp_path)
    store.folder.mkdir(parents=True)
    reasons = []
    for text in ("{not json", '{"messages": []}'):  # within one second, the second name gets a number
        store.path("broken").write_text(text)
        with pytest.raises(UnreadableChat) as caught:
            store.load("broken")
        assert caught.value.kept_as.read_text() == text
        reasons.append(caught.value.reason)
    kept = sorted(p.name for p in store.folder.iterdir())
    assert len(kept) == 2 and all(n.startswith("broken" + CORRUPT) and n.endswith(".json") for n in kept)
    assert reasons[0] == "not valid JSON at line 1, column 2" and "chat_id" in reasons[1]
    assert store.chats() == ([], [])  # files set aside are not listed again


@pytest.mark.unit
def test_older_chat_files_load_with_defaults(tmp_path):
    store = ChatStore(tmp_path)
    store.folder.mkdir(parents=True)
    store.path("old").write_text(json.dumps({"chat_id": "old", "name": "Pane 1", "messages": [{"role": "user", "content": "q"}]}))
    chat = store.load("old")
    assert (chat.model, chat.turns, chat.messages) == ("", 1, [{"role": "user", "content": "q"}])
    assert chat.updated == store.path("old").stat().st_mtime  # the file's date stands in


@pytest.mark.unit
def test_a_reply_saved_while_streaming_comes_back_cut_with_a_notice(tmp_path):
    store = ChatStore(tmp_path)
    chat = Chat.new("Pane 1")
    chat.add("user", "Tell me a story")
    chat.streaming = "Once upon"
    store.save(chat)
    saved = json.loads(store.path(chat.chat_id).read_text())
    assert saved["messages"][-1] == {"role": "assistant", "content": "Once upon", "streaming": True}
    again = store.load(chat.chat_id)
    assert again.messages[1:] == [
        {"role": "assistant", "content": "Once upon", "cut": True},
        {"role": NOTICE, "content": CUT_BY_EXIT},
    ]
    assert again.streaming is None
    assert again.for_model("")[-1] == {"role": "assistant", "content": "Once upon"}


@pytest.mark.unit
def test_pending_saves_wait_while_the_folder_cannot_be_written(tmp_path):
    store = ChatStore(tmp_path)
    saves = PendingSaves(store)
    tmp_path.joinpath("chats").write_text("a file where the folder should be")
    chat = Chat.new("Pane 1")
    saves.save(chat)
    assert isinstance(saves.failure, OSError) and saves.is_waiting
    tmp_path.joinpath("chats").unlink()
    saves.retry()
    assert saves.failure is None and not saves.is_waiting and store.load(chat.chat_id) == chat


@pytest.mark.unit
def test_export_markdown_and_json(tmp_path):
    chat = Chat("id1", "Pane 1", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    export_chat(chat, str(tmp_path / "c.md"))
    export_chat(chat, str(tmp_path / "c.json"))
    assert (tmp_path / "c.md").read_text() == to_markdown(chat) and "**You:**" in to_markdown(chat)
    assert json.loads((tmp_path / "c.json").read_text())["messages"][1]["content"] == "a"


@pytest.mark.unit
def test_an_export_name_gets_the_chosen_filters_extension_unless_it_has_a_formats():
    assert with_filter_suffix("/tmp/notes.v2", "JSON (*.json)") == "/tmp/notes.v2.json"
    assert with_filter_suffix("/tmp/c.JSON", "Markdown (*.md)") == "/tmp/c.JSON"  # typed: it decides
    assert with_filter_suffix("/tmp/c", "") == "/tmp/c.md"  # no filter said: the dialog's first


def code_lines(markdown: str) -> list[str]:
    document = markdown_document(markdown, Theme.of(QGuiApplication.palette()))
    blocks = [document.findBlockByNumber(i) for i in range(document.blockCount())]
    return [b.text() for b in blocks if b.blockFormat().nonBreakableLines()]


@pytest.mark.gui
def test_code_blocks_are_monospace_and_text_is_kept(qapp):  # Qt's Markdown reader wants the app's fonts
    document = markdown_document("See:\n```python\nif a < b:\n    pass\n```\ndone", Theme.of(qapp.palette()))
    code = document.find("if a < b:")
    assert code.block().blockFormat().nonBreakableLines() and QFontInfo(code.charFormat().font()).fixedPitch()
    assert code_lines("See:\n```python\nif a < b:\n    pass\n```\ndone") == ["if a < b:", "    pass"]


@pytest.mark.gui
def test_a_fence_is_three_backticks_at_the_start_of_a_line(qapp):
    assert code_lines("use ``` to fence code") == []
    assert code_lines("```python print(1)``` inline") == []
    document = markdown_document("```python print(1)``` inline", Theme.of(qapp.palette()))
    assert QFontInfo(document.find("print(1)").charFormat().font()).fixedPitch()  # inline code


@pytest.mark.unit
def test_ring_keeps_the_newest_points_in_order():
    ring = Ring(4)
    for i in range(6):
        ring.push(float(i), 10.0 * i)
    t, v = ring.view()
    assert list(t) == [2, 3, 4, 5] and list(v) == [20, 30, 40, 50]
    t, v = ring.last(3)  # across the wrap of the buffer
    assert list(t) == [3, 4, 5] and list(v) == [30, 40, 50]
    assert list(ring.last(9)[0]) == [2, 3, 4, 5] and len(ring.last(0)[0]) == 0


@pytest.mark.unit
def test_metrics_from_events():
    store = MetricsStore()
    store.track("r1", "pane", t_submit=10.0)
    store.on_events([TokenEvent("r1", "a", 1, 10.5), TokenEvent("r1", "b", 1, 10.6), TokenEvent("r1", "", 0, 10.6)])
    m = store.panes["pane"]
    assert math.isclose(m.ttft_s, 0.5) and np.allclose(m.itl.view()[1], [0.1])
    stats = RequestStats(
        "r1",
        prompt_tokens=30,
        cached_tokens=20,
        evaluated_tokens=10,
        gen_tokens=2,
        conversation_cached_tokens=20,
        conversation_evaluated_tokens=40,
    )
    store.on_events([FinishEvent("r1", FinishReason.STOP, "ab", stats)])
    # no first token told the prompt's hit (a remote pane's do not): the finish does, to the plot
    # and the readout alike
    assert math.isclose(m.kv_hit_rate, 2 / 3) and m.context_tokens == 32
    assert np.allclose(m.kv_hit.view()[1], [2 / 3])
    store.sample(now=11.0)
    assert m.tok_s == 2.0 and len(m.tok_rate) == 1
    store.on_events([TokenEvent("r1", "late", 1, 11.0)])  # after its finish: ignored
    assert m.gen_tokens == 2


@pytest.mark.unit
def test_a_prompts_kv_hit_is_known_at_its_first_token():
    store = MetricsStore()
    store.track("r1", "pane", t_submit=10.0)
    store.on_events([TokenEvent("r1", "a", 1, 10.5, 7, cached=90, evaluated=10)])
    m = store.panes["pane"]
    assert m.kv_hit.view()[0].tolist() == [10.5] and m.kv_hit.view()[1].tolist() == [0.9]
    assert m.kv_hit_rate == 0.9  # the readout is the plot's newest point, while the reply streams
    stats = RequestStats("r1", prompt_tokens=100, cached_tokens=90, evaluated_tokens=10, gen_tokens=1)
    store.on_events([FinishEvent("r1", FinishReason.STOP, "a", stats)])
    assert len(m.kv_hit) == 1 and m.kv_hit_rate == 0.9  # the finish adds no second point


@pytest.mark.unit
def test_pane_params_round_trip_through_qsettings(tmp_path):
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.pane_params("p") == PaneParams()
    params = PaneParams(temperature=0.3, top_k=12, seed=7, system_prompt="Be brief.", max_tokens=64)
    settings.set_pane_params("p", params)
    settings.sync()
    again = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert again.pane_params("p") == params
    assert params.sampling().top_k == 12 and params.sampling().seed == 7


@pytest.mark.unit
def test_engine_settings_round_trip_including_the_overflow_policy(tmp_path):
    ini = str(tmp_path / "settings.ini")
    chosen = EngineConfig(
        "model.gguf",
        n_ctx=2048,
        n_batch=256,
        capacity=3,
        n_threads=1,
        mode=ServingMode.SEQUENTIAL,
        overflow=OverflowPolicy.TRUNCATE,
    )
    AppSettings(QSettings(ini, QSettings.Format.IniFormat)).set_engine_config(chosen)
    restored = AppSettings(QSettings(ini, QSettings.Format.IniFormat)).engine_config("default.gguf")
    assert restored == chosen
