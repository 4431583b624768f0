"""A pane's output format on the real window, set as a person does: ⚙, the Output box, the schema typed
in, Send. The reply follows the schema and is shown formatted and marked; a bad schema is not sent."""

from __future__ import annotations

import json
import re

import pytest
from PySide6.QtCore import Qt
from ui_fixtures import QUICK, TINY_QUICK, set_params, until

from app.engine.events import FinishReason
from app.ui.settings import AppSettings, open_qsettings
from app.workspace.markdown_stream import CUT_JSON, VALID_JSON

pytestmark = pytest.mark.gui

PERSON = '{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}'


def pick_output(qtbot, pane, label: str) -> None:
    """Open the Output box with the mouse and pick `label` with the keyboard."""
    combo = pane.params_editor.output_combo
    qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
    combo.view().setCurrentIndex(combo.model().index(combo.findText(label), 0))
    qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
    assert combo.currentText() == label


async def send(qtbot, pane, text: str) -> None:
    qtbot.mouseClick(pane.input, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(pane.input, text)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)


def test_a_schema_pane_replies_json_with_its_keys_shown_formatted_and_marked_valid(run_window, qtbot):
    async def scenario(window):
        set_params(window, QUICK.with_(max_tokens=120))
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        assert not editor.output_edit.isVisible() and not editor.load_button.isVisible()  # free text: no schema field
        pick_output(qtbot, pane, "JSON schema")
        assert editor.output_edit.isVisible() and editor.load_button.isVisible()
        qtbot.mouseClick(editor.output_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClicks(editor.output_edit, PERSON)
        await until(lambda: editor.output_check.text() == "✓ valid schema", 5, "the schema's check")
        assert pane.params.output_format == "schema" and json.loads(pane.params.output_text)["required"] == ["name", "age"]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)  # the settings fold away

        finals = []
        pane.sigReplyFinished.connect(finals.append)
        await send(qtbot, pane, "Describe a person as JSON.")
        await until(lambda: finals, 120, "the reply")
        assert finals[0].reason is FinishReason.STOP  # a constrained reply ends where its format does
        person = json.loads(pane.chat.messages[-1]["content"])
        assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int)
        shown = pane.transcript.toPlainText()
        assert VALID_JSON in shown and json.dumps(person, indent=2, ensure_ascii=False) in shown
        assert not pane.refusal_label.isVisible()

        # the format is saved with the pane's settings: a new start finds it
        again = AppSettings(open_qsettings()).pane_params(pane.key)
        assert again == pane.params and again.output_format == "schema" and again.output_text == PERSON

    run_window(scenario)


def test_an_invalid_schema_says_why_and_send_does_not_send(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=6))
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        pick_output(qtbot, pane, "JSON schema")
        qtbot.mouseClick(editor.output_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClicks(editor.output_edit, '{"type": "object", "properties": {"name": ')
        await until(lambda: "not JSON" in editor.output_check.text(), 5, "the schema's check")
        assert editor.output_check.text().startswith("✗ the JSON schema is not JSON: Expecting value")

        await send(qtbot, pane, "Describe a person as JSON.")
        assert not pane.is_busy and pane.chat.messages == []  # nothing sent
        assert pane.input.toPlainText() == "Describe a person as JSON."  # the message stays typed
        assert pane.refusal_label.isVisible() and pane.refusal_label.text().startswith("Not sent: the JSON schema is not JSON")

        # any JSON object instead: the refusal goes, and the reply is shown as JSON, marked
        pick_output(qtbot, pane, "JSON")
        assert not editor.output_edit.isVisible() and not pane.refusal_label.isVisible()
        finals = []
        pane.sigReplyFinished.connect(finals.append)
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: finals, 60, "the reply")
        shown = pane.transcript.toPlainText()
        if finals[0].reason is FinishReason.LENGTH:  # six tokens seldom hold a whole object
            assert CUT_JSON in shown and "not valid JSON" not in shown
        else:
            assert finals[0].reason is FinishReason.STOP and VALID_JSON in shown

    run_tiny_window(scenario)


def test_load_reads_a_schema_or_a_grammar_file_and_checks_it(qtbot, tmp_path, monkeypatch):
    from app.ui.pane import params_editor
    from app.workspace.pane_params import PaneParams

    editor = params_editor.PaneParamsEditor(PaneParams(output_format="schema"))
    qtbot.addWidget(editor)
    editor.show()
    schema, grammar, bad = tmp_path / "person.json", tmp_path / "yes.gbnf", tmp_path / "bad.json"
    schema.write_text(PERSON)
    grammar.write_text('root ::= "yes" | "no"\n')
    bad.write_text('{"type": "object", "properties": 3}')
    for path, fmt, check in (
        (grammar, "grammar", "✓ grammar within bounds"),
        (schema, "schema", "✓ valid schema"),
        (bad, "schema", "✗ the JSON schema cannot be turned into a grammar"),
    ):
        monkeypatch.setattr(params_editor.QFileDialog, "getOpenFileName", lambda *_a, p=path: (str(p), ""))
        qtbot.mouseClick(editor.load_button, Qt.MouseButton.LeftButton)
        assert editor.params.output_format == fmt and editor.params.output_text == path.read_text()
        assert editor.output_check.text().startswith(check), editor.output_check.text()


def test_the_output_format_marks_the_replies_asked_for_under_it_not_the_earlier_ones(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK)
        pane = window.panes[0]
        await send(qtbot, pane, "Say something.")
        await until(lambda: not pane.is_busy and pane.chat.messages, what="the prose reply")
        prose = pane.transcript.toPlainText()
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        pick_output(qtbot, pane, "JSON")
        await until(lambda: pane.params.output_format == "json", 5, "the format")
        after_pick = pane.transcript.toPlainText()
        await send(qtbot, pane, "Now as JSON.")
        await until(lambda: not pane.is_busy and len(pane.chat.messages) >= 4, what="the JSON reply")
        return prose, after_pick, pane.transcript.toPlainText(), [m.get("json", False) for m in pane.chat.messages]

    prose, after_pick, after_json, marks = run_tiny_window(scenario, panes=1)
    assert after_pick == prose and "JSON" not in prose  # the earlier prose reply is not judged as JSON
    assert after_json.startswith(prose.rstrip()) and (VALID_JSON in after_json or CUT_JSON in after_json)
    assert marks[:2] == [False, False] and True in marks[2:]


def test_a_regex_pane_replies_text_that_matches_it_and_a_broken_one_or_lark_says_where(run_tiny_window, qtbot):
    async def scenario(window):
        set_params(window, TINY_QUICK.with_(max_tokens=40))
        pane = window.panes[0]
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        pick_output(qtbot, pane, "Regular expression")
        assert editor.output_edit.isVisible() and "regular expression" in editor.output_edit.placeholderText()
        qtbot.mouseClick(editor.output_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClicks(editor.output_edit, "[0-9]{3")  # checked as typed: llguidance's error, placed
        await until(lambda: "unclosed" in editor.output_check.text(), 5, "the expression's check")
        broken = editor.output_check.text()

        await send(qtbot, pane, "A code, please.")
        assert not pane.is_busy and pane.chat.messages == []  # nothing sent
        assert pane.refusal_label.isVisible() and "line 1, column 6" in pane.refusal_label.text()

        qtbot.mouseClick(editor.output_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClick(editor.output_edit, Qt.Key.Key_End)
        qtbot.keyClicks(editor.output_edit, "}-[a-c]{2}")
        await until(lambda: editor.output_check.text().startswith("✓"), 5, "the expression's check")
        fixed = editor.output_check.text()
        finals = []
        pane.sigReplyFinished.connect(finals.append)
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: finals, 60, "the reply")
        reply = pane.chat.messages[-1]["content"]

        pick_output(qtbot, pane, "Lark grammar")  # the same field, read as Lark: a place in the grammar
        qtbot.mouseClick(editor.output_edit.viewport(), Qt.MouseButton.LeftButton)
        qtbot.keyClick(editor.output_edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClicks(editor.output_edit, 'start: "#" hex')
        qtbot.keyClick(editor.output_edit, Qt.Key.Key_Return)
        qtbot.keyClicks(editor.output_edit, "hex: /[0-9a-f]{6}/ )")
        await until(lambda: "line 2" in editor.output_check.text(), 5, "the grammar's check")
        return broken, fixed, finals[0], reply, editor.output_check.text(), pane.params

    broken, fixed, final, reply, lark, params = run_tiny_window(scenario)
    assert broken == "✗ the regular expression cannot constrain a reply: line 1, column 6: unclosed counted repetition"
    assert fixed == "✓ regular expression compiled by llguidance"
    assert final.reason is FinishReason.STOP and re.fullmatch(r"[0-9]{3}-[a-c]{2}", reply)  # it ends where it matches
    assert lark.startswith("✗ the Lark grammar does not parse: line 2, column 20:"), lark
    assert params.output_format == "lark" and params.output_text == 'start: "#" hex\nhex: /[0-9a-f]{6}/ )'
