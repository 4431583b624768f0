"""Speculative decoding in the window, clicked and typed as a person does: the engine panel turns it
on (and sets the draft's length) on Apply; a greedy reply that repeats its prompt then drafts, the
pane's readout tells the last reply's acceptance ("drafts 64% of 95"; nothing where none was
drafted), and the step timeline draws the drafted tokens as their own, hatched kind above each
decode token. What is checked is what the engine reports, not how fast it went."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar
from test_ui_engine_settings import choose, type_number
from ui_fixtures import QUICK, set_params, until

from app.engine.params import SpecType
from app.ui.docks.step_timeline import DRAFTED_HATCH, KEY_LINES
from app.workspace.step_columns import PartKind

pytestmark = pytest.mark.gui

# the tiny model, greedy, writes line breaks and seldom ends: its own reply is a run it can draft from
GREEDY_100 = QUICK.with_(max_tokens=100)
PROMPT = "repeat after me: " + "the mill and the river " * 6


def _toolbar_button(window, action):
    return window.findChild(QToolBar, "main-toolbar").widgetForAction(action)


async def _send(window, qtbot, pane, text: str):
    """Type a message into the pane, press Enter, and wait for the reply's final event; return its stats."""
    finished = len(window.metrics.finished)
    qtbot.mouseClick(pane.input, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(pane.input, text)
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    await until(lambda: len(window.metrics.finished) > finished and window.workspace.is_idle, what="the reply")
    pane_key, stats = window.metrics.finished[-1]
    assert pane_key == pane.key
    return stats


def test_drafts_are_turned_on_in_the_panel_told_in_the_readout_and_drawn_hatched(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, GREEDY_100)
        (pane,) = window.panes
        qtbot.mouseClick(_toolbar_button(window, window.timeline_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        qtbot.mouseClick(_toolbar_button(window, window.engine_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        panel = window.engine_panel
        assert panel.spec_type.currentText() == "none" and not panel.spec_draft_n_max.isEnabled()
        assert panel.spec_type.toolTip().startswith("--spec-type: ")

        # off, as by default: nothing drafted, and the readout says nothing of drafts
        plain = await _send(window, qtbot, pane, PROMPT)
        assert plain.gen_tokens == 100 and plain.drafted_tokens == 0
        window.refresh_readouts()
        assert "drafts" not in pane.readout.text() and "KV hit" in pane.readout.text()
        switch = pane.params_editor.draft_ahead  # the pane's choice, never ticked where nothing drafts
        assert pane.params.draft_ahead and not switch.isChecked() and not switch.isEnabled()
        assert "does not speculate" in switch.text()

        # on, drafts of 8 tokens at most, from the panel's real widgets
        choose(qtbot, panel.spec_type, "ngram-simple")
        assert panel.spec_draft_n_max.isEnabled() and panel.spec_draft_n_min.isEnabled()
        type_number(qtbot, panel.spec_draft_n_max, "8")
        assert panel.spec_draft_n_min.maximum() == 8  # the fewest, never more than the most
        type_number(qtbot, panel.spec_draft_n_min, "1")
        panel.status.setText("")
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
        await until(lambda: panel.status.text() == "reloaded", what="the reload")
        config = window.client.config
        assert (config.spec_type, config.spec_draft_n_max, config.spec_draft_n_min) == (SpecType.NGRAM, 8, 1)
        assert switch.isChecked() and switch.isEnabled() and switch.text() == "Draft ahead (speculative)"

        stats = await _send(window, qtbot, pane, PROMPT)
        assert stats.gen_tokens == 100
        assert stats.drafted_tokens > 0 and 0 < stats.accepted_tokens <= stats.drafted_tokens
        window.refresh_readouts()
        share = round(100 * stats.accepted_tokens / stats.drafted_tokens)
        assert f" · drafts {share}% of {stats.drafted_tokens}" in pane.readout.text()
        per_step = stats.gen_tokens / (stats.gen_tokens - stats.accepted_tokens)  # each step: its token and the accepted guesses
        assert f" · {per_step:.1f} tok/step" in pane.readout.text() and per_step > 1
        assert "drafts: of the tokens the last reply drafted ahead" in pane.readout.toolTip()

        # the timeline: each drafted part's guesses stacked on its decode token, hatched in the pane's colour
        steps = window.client.recent_steps()  # the engine's since the reload: the drafting reply's
        await until(lambda: window.timeline.columns.last_t_end == steps[-1].t_end, what="a tick after the last step")
        timeline, key = window.timeline, pane.key
        mine = [(st, p) for st in steps for p in st.parts if p.conversation_id == key]
        drafting = [(st, p) for st, p in mine if p.drafted]
        assert sum(p.drafted for _, p in mine) == stats.drafted_tokens and max(p.drafted for _, p in drafting) <= 8
        x0, w, y0, h = timeline.drawn(key, PartKind.DRAFTED)
        assert h.sum() == stats.drafted_tokens and h.tolist() == [p.drafted for _, p in drafting]
        assert np.allclose(x0, [st.t_start - timeline.t0 for st, _ in drafting])
        below = [sum(q.n_tokens for q in st.parts[: st.parts.index(p)]) + p.n_tokens - p.drafted for st, p in drafting]
        assert y0.tolist() == below  # above the part's own next token
        # the decode tokens, both replies' (the timeline kept those before the reload), one each
        decode = [p for st in timeline.columns.steps for p in st.parts if p.conversation_id == key and p.is_decode]
        assert timeline.drawn(key, True)[3].tolist() == [p.n_tokens - p.drafted for p in decode]
        layer = timeline.bars[(key, PartKind.DRAFTED)]
        assert layer.body.brush().style() == DRAFTED_HATCH and layer.body.brush().color().name() == pane.session.colour
        assert layer.body.under_brush().color().alpha() < 255
        assert "hatched: drafted tokens" in KEY_LINES[0] and "hatched: drafted tokens" in timeline.key_label.text
        step, part = drafting[-1]
        x = (step.t_start + step.t_end) / 2 - timeline.t0 - timeline._x_right
        assert re.search(rf": 1 decode \+ {part.drafted} drafted", timeline.hover_text(x))

        # a reply that drafts nothing (one token asked: no room for a guess after it) clears the figure
        set_params(window, GREEDY_100.with_(max_tokens=1))
        short = await _send(window, qtbot, pane, "Hi")
        assert short.drafted_tokens == 0
        window.refresh_readouts()
        assert "drafts" not in pane.readout.text()

        # the pane's own switch, in its ⚙ settings: off, this pane never drafts
        set_params(window, GREEDY_100)
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        assert editor.draft_ahead.isChecked() and pane.session.params.draft_ahead
        qtbot.mouseClick(editor.draft_ahead, Qt.MouseButton.LeftButton)
        assert not pane.session.params.draft_ahead
        off = await _send(window, qtbot, pane, PROMPT)
        assert off.gen_tokens == 100 and off.drafted_tokens == 0

    run_tiny_window(scenario, panes=1)


def test_a_draft_model_is_picked_in_the_panel_and_drafts_for_the_pane(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, GREEDY_100)
        (pane,) = window.panes
        qtbot.mouseClick(_toolbar_button(window, window.engine_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
        panel = window.engine_panel
        assert not panel.spec_draft_model.isEnabled() and not panel.spec_draft_p_min.isEnabled()
        assert panel.spec_draft_model.toolTip().startswith("-md, --model-draft, --spec-draft-model: ")

        # draft-simple without a draft model is not applied, and says why
        choose(qtbot, panel.spec_type, "draft-simple")
        assert panel.spec_draft_model.isEnabled() and panel.spec_draft_p_min.isEnabled()
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
        await until(lambda: "needs one" in panel.status.text(), what="the refusal")
        assert window.client.config.spec_type is SpecType.NONE

        # the model drafting for itself, 4 guesses at every step: each one right
        qtbot.mouseClick(panel.spec_draft_model, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(panel.spec_draft_model, window.client.config.model_path)
        type_number(qtbot, panel.spec_draft_n_min, "4")
        panel.status.setText("")
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
        await until(lambda: panel.status.text() == "reloaded", what="the reload")
        config = window.client.config
        assert (config.spec_type, config.spec_draft_model) == (SpecType.DRAFT, config.model_path)

        stats = await _send(window, qtbot, pane, PROMPT)
        assert stats.gen_tokens == 100 and stats.drafted_tokens > 40 and stats.accepted_tokens == stats.drafted_tokens
        window.refresh_readouts()
        assert f" · drafts 100% of {stats.drafted_tokens}" in pane.readout.text()

    run_tiny_window(scenario, panes=1)
