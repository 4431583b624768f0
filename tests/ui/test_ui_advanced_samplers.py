"""The pane's Advanced group on the real window, used as a person does: ⚙, Advanced, a slider moved, a
value typed past the slider's span and one out of range refused, the sampler order typed, a logit
bias added by text (the pane's model makes it tokens) and by id; the request carries them and the
settings file keeps them."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from ui_fixtures import TINY_QUICK, set_params, until

from app.ui.settings import AppSettings, open_qsettings

pytestmark = pytest.mark.gui


def type_into(qtbot, edit, text: str) -> None:
    """Replace a line's text as a person does, then Enter."""
    qtbot.mouseClick(edit, Qt.MouseButton.LeftButton)
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(edit, Qt.Key.Key_Backspace)
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


def test_the_advanced_group_sets_the_samplers_a_request_is_drawn_with(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=400))
        pane = window.panes[0]
        editor = pane.params_editor
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        assert editor.advanced_button.isVisible() and not editor.advanced_group.isVisible()  # folded at first
        qtbot.mouseClick(editor.advanced_button, Qt.MouseButton.LeftButton)
        assert editor.advanced_group.isVisible()

        xtc = editor.sliders["xtc_probability"]
        pane.params_area.ensureWidgetVisible(xtc)
        qtbot.mouseClick(xtc, Qt.MouseButton.LeftButton)
        qtbot.keyClick(xtc, Qt.Key.Key_End)
        assert pane.params.xtc_probability == 1.0 and editor.advanced_button.text() == "Advanced samplers (1 set)"

        type_into(qtbot, editor.values["repeat_last_n"], "4096")  # past the slider's span, within the range
        assert pane.params.repeat_last_n == 4096 and editor.values["repeat_last_n"].text() == "4096"
        type_into(qtbot, editor.values["mirostat"], "3")
        refusal = editor._refusals["mirostat"]
        assert refusal.isVisible() and "mirostat must be a whole number between 0 and 2" in refusal.text()
        assert pane.params.mirostat == 0 and editor.values["mirostat"].text() == "0"

        order = editor.list_edits["samplers"]
        pane.params_area.ensureWidgetVisible(order)
        type_into(qtbot, order, "top_k, nonsense")
        assert editor._refusals["samplers"].isVisible() and "'samplers[1]' must be one of" in editor._refusals["samplers"].text()
        type_into(qtbot, order, "ekt")  # llama.cpp's letters: penalties, top-k, temperature
        assert pane.params.samplers == ("penalties", "top_k", "temperature") and order.text() == "penalties, top_k, temperature"
        assert not editor._refusals["samplers"].isVisible()

        bias = editor.bias_editor
        pane.params_area.ensureWidgetVisible(bias.add_button)
        type_into(qtbot, bias.token_edit, " cat")  # Enter adds it
        await until(lambda: pane.params.logit_bias, 10, "the text's tokens")
        cat = await window.client.tokenize(" cat", add_special=False, parse_special=False)
        assert pane.params.logit_bias == tuple((t, -100.0) for t in cat)
        assert bias.list.item(0).text() == f"{cat[0]} ' cat' → -100"
        qtbot.mouseClick(bias.token_edit, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(bias.token_edit, "15")
        bias.bias_box.setValue(5.0)
        qtbot.mouseClick(bias.add_button, Qt.MouseButton.LeftButton)
        assert pane.params.logit_bias[-1] == (15, 5.0) and bias.list.count() == len(cat) + 1
        bias.list.setCurrentRow(bias.list.count() - 1)
        qtbot.mouseClick(bias.remove_button, Qt.MouseButton.LeftButton)
        assert pane.params.logit_bias == tuple((t, -100.0) for t in cat)

        pane.session.send("Go on.")
        await until(lambda: window.metrics.panes[pane.key].gen_tokens >= 1, what="the first token")
        running = await window.client.call(lambda engine: [s.params for s in engine.scheduler.running])
        pane.session.stop()
        await until(lambda: not pane.is_busy)
        sent = running[0]
        assert (sent.xtc_probability, sent.repeat_last_n, sent.samplers) == (1.0, 4096, ("penalties", "top_k", "temperature"))
        assert sent.logit_bias == pane.params.logit_bias

        assert AppSettings(open_qsettings()).pane_params(pane.key) == pane.params  # the settings file keeps them
        pane.params_area.ensureWidgetVisible(editor.reset_advanced_button)
        qtbot.mouseClick(editor.reset_advanced_button, Qt.MouseButton.LeftButton)
        assert (
            pane.params.xtc_probability == 0.0
            and pane.params.logit_bias == ()
            and editor.advanced_button.text() == "Advanced samplers"
        )
        assert bias.list.count() == 0 and order.text().startswith("penalties, dry, top_n_sigma")

    run_tiny_window(scenario, panes=1)
