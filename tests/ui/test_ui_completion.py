"""Completion mode on the real window: a base model's panes continue text (the bundled model's words);
any pane can switch (the tiny model: what is checked is the prompt, not the words)."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import QPoint, Qt
from ui_fixtures import QUICK, TINY_QUICK, close_window, open_window, set_params, until

from app.workspace.chat_store import NOTICE

pytestmark = pytest.mark.gui

TEMPLATE_KEY = b"tokenizer.chat_template"


@pytest.fixture(scope="module")
def base_model_path(model_path, tmp_path_factory) -> str:
    """The bundled model with its chat template's key renamed: to llama.cpp, a model without one (a base model)."""
    path = tmp_path_factory.mktemp("base") / "base-model.gguf"
    shutil.copyfile(model_path, path)
    with open(path, "r+b") as f:
        head = f.read(4 << 20)
        at = head.index(TEMPLATE_KEY)
        f.seek(at)
        f.write(b"tokenizer.chat_templatX")  # same length: the header stays whole
    return str(path)


def test_a_base_model_s_panes_continue_the_text(loop, home, base_model_path, qtbot):
    async def main():
        window = await open_window(base_model_path, home, panes=2)
        try:
            pane = window.panes[0]
            assert all(p.params.completion for p in window.panes)  # no chat template: completion mode
            assert "no chat template" in window.statusBar().currentMessage()
            assert "✎" in pane.name_label.text() and "continue" in pane.input.placeholderText()
            set_params(window, QUICK.with_(max_tokens=12, completion=True))
            qtbot.keyClicks(pane.input, "Once upon a time, in a small village by the sea,")
            qtbot.keyClick(pane.input, Qt.Key.Key_Return)
            await until(lambda: not pane.is_busy, what="the continuation")
            assert [m["role"] for m in pane.chat.messages[:2]] == ["user", "assistant"]
            first = pane.chat.as_text()
            assert first.startswith("Once upon a time, in a small village by the sea,") and len(first) > 52
            assert "Assistant" not in pane.transcript.toPlainText()  # one text, no names
            assert pane.transcript.toPlainText().startswith(first[:40])
            qtbot.keyClick(pane.input, Qt.Key.Key_Return)  # nothing typed: the model goes on
            await until(lambda: not pane.is_busy, what="more of it")
            text = pane.chat.as_text()
            assert text.startswith(first) and len(text) > len(first)
            assert [m["role"] for m in pane.chat.messages if m["role"] != NOTICE][-1] == "assistant"
            plain = pane.transcript.toPlainText()
            assert text.replace("\n", "")[:120] in plain.replace("\n", "")  # the whole text, as written
        finally:
            await close_window(window)

    loop.run_until_complete(main())


def test_a_chat_pane_switches_to_completion_in_its_settings(run_tiny_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        assert not pane.params.completion  # the tiny model has the bundled one's chat template
        set_params(window, TINY_QUICK.with_(max_tokens=8))
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        box = pane.params_editor.completion
        qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))
        assert pane.params.completion and window.settings.pane_params(pane.key).completion  # kept for the next start
        qtbot.keyClicks(pane.input, "The capital of France is")
        qtbot.keyClick(pane.input, Qt.Key.Key_Return)
        await until(lambda: not pane.is_busy, what="the continuation")
        stats = window.metrics.panes[pane.key]
        assert stats.context_tokens < 20  # the text alone, no chat template around it
        assert pane.chat.as_text().startswith("The capital of France is")

    run_tiny_window(scenario, panes=1)
