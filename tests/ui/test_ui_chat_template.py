"""A chat template file instead of the model's own, chosen in the Engine panel: typed into its field
and applied, the model reloads with it (a template that refuses a system message gets it folded, and
a pane's chat with a system prompt is answered); it is kept for that model in the settings and shown
in the model library; cleared, the model's own comes back; a broken file is refused with its line,
the model kept; a file kept for a model and gone since leaves it its own template, with a notice."""

from __future__ import annotations

import os

import caps_templates
import pytest
from PySide6.QtCore import Qt
from ui_fixtures import QUICK, set_params, until

from app.client import new_request_id
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request
from app.ui.docks.model_library import TEMPLATE
from app.ui.main import usable_template

SYSTEM = "Answer in one word."
ASK = {"role": "user", "content": "What is the capital of France?"}


async def _apply(qtbot, panel) -> str:
    panel.status.setText("")
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    await until(lambda: panel.status.text() and panel.status.text() != "loading…", what="the reload")
    return panel.status.text()


async def _prompt(window) -> str:
    messages = ({"role": "system", "content": SYSTEM}, ASK)
    return await window.client.apply_template(Request(new_request_id(), GREEDY, messages=messages))


@pytest.mark.gui
def test_a_template_file_chosen_in_the_engine_panel_is_used_kept_and_given_up(run_window, qtbot, model_path, tmp_path):
    mine, broken = tmp_path / "gemma2.jinja", tmp_path / "broken.jinja"
    mine.write_text(caps_templates.REFUSES_SYSTEM)
    broken.write_text("{{ bos_token }}\n{% for m in messages %}")

    async def scenario(window):
        panel, pane = window.engine_panel, window.panes[0]
        own = await _prompt(window)
        qtbot.keyClicks(panel.chat_template_file, str(mine))
        applied = await _apply(qtbot, panel)
        folded = await _prompt(window)
        facts, kept = panel.model_facts.text(), window.settings.chat_template_for(model_path)
        rows = [r for r, e in enumerate(window.library.entries) if os.path.realpath(e.path) == os.path.realpath(model_path)]
        library = window.library.table.item(rows[0], TEMPLATE).text() if rows else ""  # listed once its scan is done
        set_params(window, QUICK.with_(max_tokens=8, system_prompt=SYSTEM))
        pane.session.send("What is the capital of France?")
        await until(lambda: not pane.session.is_busy and len(pane.chat.messages) >= 2, what="the reply")
        answered = pane.chat.messages[1]
        panel.chat_template_file.clear()  # as the field's clear button does: the model's own again
        await _apply(qtbot, panel)
        again, given_up = await _prompt(window), window.settings.chat_template_for(model_path)
        qtbot.keyClicks(panel.chat_template_file, str(broken))
        refused = await _apply(qtbot, panel)
        still = await _prompt(window)
        return own, applied, folded, facts, kept, library, answered, again, given_up, refused, still

    own, applied, folded, facts, kept, library, answered, again, given_up, refused, still = run_window(scenario)
    assert applied == "reloaded" and "<start_of_turn>" not in own
    assert f"<start_of_turn>user\n{SYSTEM}\n{ASK['content']}<end_of_turn>" in folded
    assert "Chat template: gemma2.jinja, instead of the model's own" in facts
    assert kept == str(mine) and library in ("", "gemma2.jinja (instead of its own)")
    assert answered["role"] == "assistant"  # the chat with a system prompt was answered, not refused
    assert again == own and given_up is None
    assert "Kept the previous model" in refused and "broken.jinja" in refused and "line 2" in refused
    assert still == own


@pytest.mark.unit
def test_a_template_file_kept_for_a_model_and_gone_since_leaves_it_its_own_with_a_notice(tmp_path):
    mine = tmp_path / "mine.jinja"
    mine.write_text(caps_templates.FUNCTIONS)
    notices: list[str] = []
    assert usable_template(str(mine), "/models/small.gguf", notices) == str(mine) and notices == []
    assert usable_template(None, "/models/small.gguf", notices) is None and notices == []
    mine.unlink()
    assert usable_template(str(mine), "/models/small.gguf", notices) is None
    assert notices == [f"small.gguf chats with its own template: the chat template file {mine} does not exist"]
